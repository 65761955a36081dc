//! A local Compute Engine fake for the GCP driver's tests: the REST calls the driver makes (instances insert, get,
//! delete and list; zone operations get) on 127.0.0.1, answering with the API's JSON shapes (camelCase, int64 as
//! strings, `compute#...` kinds, full resource URLs, long-running operations, `{"error": {...}}` errors). It keeps
//! the disks an insert creates (deleted with the instance when `autoDelete`), records every request, and can be
//! told to fail calls or operations.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const API: &str = "https://www.googleapis.com/compute/v1";

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// `GET`, `POST`, `DELETE`.
    pub method: String,
    /// The path, e.g. `/compute/v1/projects/p/zones/z/instances`.
    pub path: String,
    /// The query string (without `?`).
    pub query: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
}

impl Recorded {
    /// Whether this is `method` on a path ending in `suffix`.
    pub fn is(&self, method: &str, suffix: &str) -> bool {
        self.method == method && self.path.ends_with(suffix)
    }
}

/// A canned error answer for the next `times` calls of `method` whose path contains `path_contains`.
#[derive(Clone, Debug)]
pub struct Fault {
    pub method: &'static str,
    pub path_contains: String,
    pub status: u16,
    pub reason: &'static str,
    pub message: String,
    pub times: usize,
}

/// What a zone operation does when it finishes.
#[derive(Clone, Debug)]
enum Effect {
    /// The inserted instance turns RUNNING.
    Run(Key),
    /// The instance and its auto-delete disks go.
    Remove(Key),
    /// Nothing (the operation failed).
    None,
}

#[derive(Clone, Debug)]
struct Operation {
    body: Value,
    polls_left: u32,
    effect: Effect,
    error: Option<(String, String)>,
}

/// (project, zone, name).
type Key = (String, String, String);

#[derive(Default)]
struct World {
    instances: BTreeMap<Key, Value>,
    disks: BTreeMap<Key, Value>,
    operations: BTreeMap<String, Operation>,
    requests: Vec<Recorded>,
    faults: Vec<Fault>,
    /// Errors the next insert operations end with (code, message).
    insert_operation_errors: VecDeque<(String, String)>,
    /// Operation polls until DONE (0: the call's own answer is DONE).
    polls_until_done: u32,
    /// Instances per page of a list (the request's `maxResults` if smaller).
    page_size: usize,
    next_id: u64,
}

/// The running fake; stops when dropped.
pub struct ComputeFake {
    /// `http://127.0.0.1:<port>`: the driver's endpoint.
    pub url: String,
    world: Arc<Mutex<World>>,
    task: JoinHandle<()>,
}

impl Drop for ComputeFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ComputeFake {
    /// A fake on a free port of 127.0.0.1 whose operations are DONE at the `polls_until_done`-th poll (0: at once).
    pub async fn start(polls_until_done: u32) -> ComputeFake {
        let world = Arc::new(Mutex::new(World { polls_until_done, page_size: 500, next_id: 1000, ..World::default() }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().fallback(handle).with_state(world.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ComputeFake { url, world, task }
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.world().requests.clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.world().requests.clear();
    }

    /// Answers the next matching calls with an error.
    pub fn fail(&self, fault: Fault) {
        self.world().faults.push(fault);
    }

    /// Forgets the faults not used up.
    pub fn clear_faults(&self) {
        self.world().faults.clear();
    }

    /// The next insert's operation ends with this error code and message.
    pub fn fail_next_insert_operation(&self, code: &str, message: &str) {
        self.world().insert_operation_errors.push_back((code.into(), message.into()));
    }

    /// Instances per page of `instances.list`.
    pub fn set_page_size(&self, size: usize) {
        self.world().page_size = size.max(1);
    }

    /// The instances in `zone` of `project`, by name.
    pub fn instances(&self, project: &str, zone: &str) -> BTreeMap<String, Value> {
        self.world()
            .instances
            .iter()
            .filter(|((p, z, _), _)| p == project && z == zone)
            .map(|((_, _, n), i)| (n.clone(), i.clone()))
            .collect()
    }

    /// The names of every disk the fake holds (any project and zone).
    pub fn disks(&self) -> Vec<String> {
        self.world().disks.keys().map(|(_, _, n)| n.clone()).collect()
    }

    /// Puts an instance there behind the driver's back (someone else's VM), with these network tags.
    pub fn seed_instance(&self, project: &str, zone: &str, name: &str, tags: &[&str]) {
        let mut world = self.world();
        let id = world.next_id();
        let body = json!({"name": name, "tags": {"items": tags}, "machineType": format!("zones/{zone}/machineTypes/e2-small")});
        let instance = world.instance_of(project, zone, &body, id);
        world.instances.insert((project.into(), zone.into(), name.into()), instance);
    }
}

impl World {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The stored instance for an insert body, in the shape `instances.get` answers.
    fn instance_of(&mut self, project: &str, zone: &str, body: &Value, id: u64) -> Value {
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let zone_url = format!("{API}/projects/{project}/zones/{zone}");
        let full = |path: &str| {
            if path.starts_with("https://") { path.to_string() } else { format!("{API}/projects/{project}/{path}") }
        };
        let full_global = |path: &str| {
            if path.starts_with("https://") {
                path.to_string()
            } else if path.starts_with("projects/") {
                format!("{API}/{path}")
            } else {
                format!("{API}/projects/{project}/{path}")
            }
        };
        let mut disks = Vec::new();
        for (i, d) in body["disks"].as_array().cloned().unwrap_or_default().iter().enumerate() {
            let disk_name = if i == 0 { name.clone() } else { format!("{name}-disk-{i}") };
            let scratch = d["type"] == "SCRATCH";
            let source = format!("{zone_url}/disks/{disk_name}");
            let size = d.pointer("/initializeParams/diskSizeGb").and_then(Value::as_str).unwrap_or("10").to_string();
            if !scratch {
                let disk_id = self.next_id();
                self.disks.insert(
                    (project.into(), zone.into(), disk_name.clone()),
                    json!({"kind": "compute#disk", "id": disk_id.to_string(), "name": disk_name, "sizeGb": size,
                           "zone": zone_url, "status": "READY", "selfLink": source,
                           "type": full(d.pointer("/initializeParams/diskType").and_then(Value::as_str).unwrap_or("")),
                           "users": [format!("{zone_url}/instances/{name}")]}),
                );
            }
            let mut attached = json!({
                "kind": "compute#attachedDisk", "type": d["type"], "mode": "READ_WRITE", "deviceName": format!("persistent-disk-{i}"),
                "index": i, "boot": d["boot"], "autoDelete": d["autoDelete"], "interface": d.get("interface").cloned().unwrap_or(json!("SCSI")),
                "diskSizeGb": size,
            });
            if !scratch {
                attached["source"] = json!(source);
            }
            disks.push(attached);
        }
        let nics: Vec<Value> = body["networkInterfaces"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut nic = json!({
                    "kind": "compute#networkInterface", "name": format!("nic{i}"),
                    "networkIP": format!("10.{i}.{}.{}", (id / 250) % 250, id % 250 + 2),
                    "fingerprint": "ZmFrZS1mcCE=", "stackType": n.get("stackType").cloned().unwrap_or(json!("IPV4_ONLY")),
                });
                if let Some(network) = n["network"].as_str() {
                    nic["network"] = json!(full_global(network));
                }
                if let Some(sub) = n["subnetwork"].as_str() {
                    nic["subnetwork"] = json!(full_global(sub));
                }
                if let Some(configs) = n["accessConfigs"].as_array() {
                    nic["accessConfigs"] = json!(configs.iter().map(|c| json!({
                        "kind": "compute#accessConfig", "type": c["type"], "name": c["name"],
                        "natIP": format!("34.{}.{}.{}", i, (id / 250) % 250, id % 250 + 1), "networkTier": "PREMIUM",
                    })).collect::<Vec<_>>());
                }
                nic
            })
            .collect();
        let mut instance = json!({
            "kind": "compute#instance",
            "id": id.to_string(),
            "creationTimestamp": "2026-12-03T02:00:00.000-08:00",
            "name": name,
            "tags": {"items": body.pointer("/tags/items").cloned().unwrap_or(json!([])), "fingerprint": "ZmFrZS1mcCE="},
            "machineType": full(body["machineType"].as_str().unwrap_or_default()),
            "status": "PROVISIONING",
            "zone": zone_url,
            "canIpForward": body.get("canIpForward").cloned().unwrap_or(json!(false)),
            "networkInterfaces": nics,
            "disks": disks,
            "metadata": {"kind": "compute#metadata", "fingerprint": "ZmFrZS1mcCE=", "items": body.pointer("/metadata/items").cloned().unwrap_or(json!([]))},
            "selfLink": format!("{zone_url}/instances/{name}"),
            "scheduling": body.get("scheduling").cloned().unwrap_or(json!({"onHostMaintenance": "MIGRATE", "automaticRestart": true, "preemptible": false})),
            "cpuPlatform": "Unknown CPU Platform",
            "labelFingerprint": "ZmFrZS1mcCE=",
            "startRestricted": false,
            "deletionProtection": body.get("deletionProtection").cloned().unwrap_or(json!(false)),
            "fingerprint": "ZmFrZS1mcCE=",
            "lastStartTimestamp": "2026-12-03T02:00:05.000-08:00",
        });
        for key in ["labels", "serviceAccounts", "description", "guestAccelerators", "shieldedInstanceConfig"] {
            if let Some(v) = body.get(key) {
                instance[key] = v.clone();
            }
        }
        instance
    }

    /// A new zone operation for `op_type` on `target`.
    fn operation(
        &mut self,
        project: &str,
        zone: &str,
        op_type: &str,
        target: &str,
        effect: Effect,
        error: Option<(String, String)>,
    ) -> Value {
        let id = self.next_id();
        let name = format!("operation-{id}-5f0e1a2b3c4d5-6e7f8a9b-0c1d2e3f");
        let zone_url = format!("{API}/projects/{project}/zones/{zone}");
        let body = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "zone": zone_url,
            "operationType": op_type,
            "targetLink": format!("{zone_url}/instances/{target}"),
            "targetId": id.to_string(),
            "status": "RUNNING",
            "user": "mcm@test.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": "2026-12-03T02:00:00.000-08:00",
            "startTime": "2026-12-03T02:00:00.100-08:00",
            "selfLink": format!("{zone_url}/operations/{name}"),
        });
        let mut op = Operation { body, polls_left: self.polls_until_done, effect, error };
        if op.polls_left == 0 {
            op.body = self.finish(op.clone());
        }
        let answer = op.body.clone();
        self.operations.insert(name, op);
        answer
    }

    /// Finishes an operation: applies its effect and answers it DONE (with its error, if any).
    fn finish(&mut self, op: Operation) -> Value {
        match &op.effect {
            Effect::Run(key) => {
                if let Some(i) = self.instances.get_mut(key) {
                    i["status"] = json!("RUNNING");
                }
            }
            Effect::Remove(key) => {
                if let Some(instance) = self.instances.remove(key) {
                    for d in instance["disks"].as_array().cloned().unwrap_or_default() {
                        let disk = d["source"].as_str().and_then(|s| s.rsplit('/').next()).unwrap_or_default();
                        if d["autoDelete"] == true {
                            self.disks.remove(&(key.0.clone(), key.1.clone(), disk.to_string()));
                        }
                    }
                }
            }
            Effect::None => {}
        }
        let mut body = op.body.clone();
        body["status"] = json!("DONE");
        body["progress"] = json!(100);
        body["endTime"] = json!("2026-12-03T02:00:09.000-08:00");
        if let Some((code, message)) = &op.error {
            body["error"] = json!({"errors": [{"code": code, "message": message}]});
            body["httpErrorStatusCode"] = json!(if code.contains("EXHAUSTED") { 503 } else { 400 });
            body["httpErrorMessage"] =
                json!(if code.contains("EXHAUSTED") { "SERVICE UNAVAILABLE" } else { "BAD REQUEST" });
        }
        body
    }
}

/// Compute's error shape.
fn error(status: u16, reason: &str, message: &str) -> Response {
    let body = json!({"error": {"code": status, "message": message, "errors": [{"message": message, "domain": "global", "reason": reason}]}});
    (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), axum::Json(body)).into_response()
}

fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn handle(
    State(world): State<Arc<Mutex<World>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut world = world.lock().unwrap();
    let path = uri.path().to_string();
    let query = uri.query().unwrap_or_default().to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    world.requests.push(Recorded {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string),
        body: body.clone(),
    });
    if let Some(i) = world.faults.iter().position(|f| f.method == method.as_str() && path.contains(&f.path_contains)) {
        let fault = world.faults[i].clone();
        world.faults[i].times -= 1;
        if world.faults[i].times == 0 {
            world.faults.remove(i);
        }
        return error(fault.status, fault.reason, &fault.message);
    }
    // OAuth's token endpoint, for service-account keys whose token_uri points here.
    if method == Method::POST && path == "/token" {
        return ok(json!({"access_token": "fake-access-token", "expires_in": 3600, "token_type": "Bearer"}));
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["compute", "v1", "projects", project, "zones", zone, rest @ ..] = segments.as_slice() else {
        return error(404, "notFound", &format!("fake: no route for {method} {path}"));
    };
    let (project, zone) = (project.to_string(), zone.to_string());
    let params: BTreeMap<String, String> = serde_urlencoded::from_str(&query).unwrap_or_default();
    let not_found = |kind: &str, name: &str| {
        error(404, "notFound", &format!("The resource 'projects/{project}/zones/{zone}/{kind}/{name}' was not found"))
    };
    match (method.as_str(), rest) {
        ("POST", ["instances"]) => {
            let Some(name) = body["name"].as_str().map(str::to_string) else {
                return error(400, "required", "Required field 'resource.name' not specified");
            };
            let key = (project.clone(), zone.clone(), name.clone());
            if world.instances.contains_key(&key) {
                return error(
                    409,
                    "alreadyExists",
                    &format!("The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"),
                );
            }
            let failure = world.insert_operation_errors.pop_front();
            let effect = if failure.is_some() {
                Effect::None
            } else {
                let id = world.next_id();
                let instance = world.instance_of(&project, &zone, &body, id);
                world.instances.insert(key.clone(), instance);
                Effect::Run(key)
            };
            ok(world.operation(&project, &zone, "insert", &name, effect, failure))
        }
        ("GET", ["instances"]) => {
            let page_size = params.get("maxResults").and_then(|m| m.parse().ok()).unwrap_or(500).min(world.page_size);
            let start: usize = params.get("pageToken").and_then(|t| t.parse().ok()).unwrap_or(0);
            let all: Vec<Value> = world
                .instances
                .iter()
                .filter(|((p, z, _), _)| *p == project && *z == zone)
                .map(|(_, i)| i.clone())
                .collect();
            let page: Vec<Value> = all.iter().skip(start).take(page_size).cloned().collect();
            let mut answer = json!({
                "kind": "compute#instanceList",
                "id": format!("projects/{project}/zones/{zone}/instances"),
                "items": page,
                "selfLink": format!("{API}/projects/{project}/zones/{zone}/instances"),
            });
            if start + page_size < all.len() {
                answer["nextPageToken"] = json!((start + page_size).to_string());
            }
            ok(answer)
        }
        ("GET", ["instances", name]) => match world.instances.get(&(project.clone(), zone.clone(), name.to_string())) {
            Some(i) => ok(i.clone()),
            None => not_found("instances", name),
        },
        ("DELETE", ["instances", name]) => {
            let key = (project.clone(), zone.clone(), name.to_string());
            match world.instances.get_mut(&key) {
                None => not_found("instances", name),
                Some(i) => {
                    i["status"] = json!("STOPPING");
                    ok(world.operation(&project, &zone, "delete", name, Effect::Remove(key), None))
                }
            }
        }
        ("GET", ["operations", name]) => {
            let Some(op) = world.operations.get_mut(*name) else { return not_found("operations", name) };
            if op.body["status"] == "DONE" {
                return ok(op.body.clone());
            }
            op.polls_left = op.polls_left.saturating_sub(1);
            if op.polls_left > 0 {
                return ok(op.body.clone());
            }
            let op = op.clone();
            let done = world.finish(op);
            if let Some(stored) = world.operations.get_mut(*name) {
                stored.body = done.clone();
            }
            ok(done)
        }
        _ => error(404, "notFound", &format!("fake: no route for {method} {path}")),
    }
}
