//! A local Azure Resource Manager for the Azure driver's tests, on 127.0.0.1: exactly the calls the driver makes
//! (the Entra ID token endpoint; NIC and VM PUT/GET/DELETE/list; disk GET/DELETE/list; asynchronous-operation
//! polling through `Azure-AsyncOperation` and `Location`), answering with ARM's JSON shapes and status codes, and
//! recording every request.
//!
//! What it keeps of ARM's behaviour, because the driver depends on it: PUT and DELETE are long-running (201/202 and
//! an operation URL that reports `InProgress` for a few polls); a VM PUT needs its NIC to exist and creates the
//! managed disks, untagged and attached (`managedBy`); deleting a VM deletes the NIC and disks whose `deleteOption`
//! is `Delete` and detaches the others; an attached NIC or disk cannot be deleted; a VM's GET never shows its
//! custom data; absent resources answer 404 `ResourceNotFound`, and deleting one answers 204; lists come in pages
//! of two with a `nextLink`. Faults (throttling, quota, failed operations) are injected per method and path.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;

pub const SUBSCRIPTION: &str = "00000000-0000-4000-8000-0000000000a1";
pub const TENANT: &str = "00000000-0000-4000-8000-0000000000b2";
pub const CLIENT_ID: &str = "fake-arm-client-id-0001";
pub const CLIENT_SECRET: &str = "Fake~Arm.Client-Secret_0123456789";
pub const RESOURCE_GROUP: &str = "shoot--dev";
pub const VNET_GROUP: &str = "shoot--dev-vnet";
pub const VNET: &str = "shoot--dev";
pub const SUBNET: &str = "shoot--dev-nodes";
pub const LOCATION: &str = "westeurope";
/// The access token the fake hands out and expects.
pub const TOKEN: &str = "fake-arm-access-token";

/// The resource kinds the driver touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Vm,
    Nic,
    Disk,
}

impl Kind {
    fn of(namespace: &str, kind: &str) -> Option<Kind> {
        match (namespace.to_ascii_lowercase().as_str(), kind.to_ascii_lowercase().as_str()) {
            ("microsoft.compute", "virtualmachines") => Some(Kind::Vm),
            ("microsoft.compute", "disks") => Some(Kind::Disk),
            ("microsoft.network", "networkinterfaces") => Some(Kind::Nic),
            _ => None,
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            Kind::Vm => "Microsoft.Compute/virtualMachines",
            Kind::Nic => "Microsoft.Network/networkInterfaces",
            Kind::Disk => "Microsoft.Compute/disks",
        }
    }

    fn namespace(self) -> &'static str {
        match self {
            Kind::Nic => "Microsoft.Network",
            Kind::Vm | Kind::Disk => "Microsoft.Compute",
        }
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: String,
    /// The Authorization header, if any.
    pub authorization: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
}

impl Recorded {
    /// The body as JSON (`null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// What an injected fault does.
#[derive(Clone, Debug)]
enum FaultAnswer {
    /// Answer at once with this status and ARM error (and `Retry-After` seconds).
    Http { status: u16, code: String, message: String, retry_after: Option<u32> },
    /// Accept the request, then let its asynchronous operation end `Failed` with this error.
    FailedOperation { code: String, message: String },
}

#[derive(Clone, Debug)]
struct Fault {
    method: String,
    path_contains: String,
    remaining: u32,
    answer: FaultAnswer,
}

/// What finishing an operation does.
#[derive(Clone, Debug)]
enum Effect {
    Provisioned(String),
    ProvisioningFailed(String),
    Deleted(Kind, String),
    Nothing,
}

#[derive(Clone, Debug)]
struct Operation {
    polls_left: u32,
    effect: Effect,
    error: Option<(String, String)>,
    done: bool,
}

struct Inner {
    base: String,
    /// (kind, resource group, name), all lower case -> the resource as ARM shows it.
    resources: BTreeMap<(Kind, String, String), Value>,
    groups: BTreeSet<String>,
    subnets: BTreeSet<String>,
    operations: HashMap<String, Operation>,
    faults: Vec<Fault>,
    requests: Vec<Recorded>,
    polls: u32,
    vm_polls: u32,
    next_ip: u32,
    next_op: u32,
}

/// The fake ARM (and token endpoint), stopped when dropped.
pub struct ArmFake {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ArmFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn json(status: u16, body: Value) -> Reply {
        Reply { status, headers: Vec::new(), body: body.to_string() }
    }

    fn empty(status: u16) -> Reply {
        Reply { status, headers: Vec::new(), body: String::new() }
    }

    fn error(status: u16, code: &str, message: &str) -> Reply {
        Reply::json(status, json!({"error": {"code": code, "message": message}}))
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

impl ArmFake {
    /// A fake with resource groups [`RESOURCE_GROUP`] and [`VNET_GROUP`] and the subnet [`SUBNET`] of [`VNET`];
    /// every operation reports `InProgress` once before it ends.
    pub async fn start() -> ArmFake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let subnet = format!(
            "/subscriptions/{SUBSCRIPTION}/resourceGroups/{VNET_GROUP}/providers/Microsoft.Network/virtualNetworks/{VNET}\
             /subnets/{SUBNET}"
        );
        let inner = Arc::new(Mutex::new(Inner {
            base: url.clone(),
            resources: BTreeMap::new(),
            groups: [RESOURCE_GROUP, VNET_GROUP].iter().map(|g| g.to_ascii_lowercase()).collect(),
            subnets: [subnet.to_ascii_lowercase()].into(),
            operations: HashMap::new(),
            faults: Vec::new(),
            requests: Vec::new(),
            polls: 1,
            vm_polls: 1,
            next_ip: 4,
            next_op: 0,
        }));
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ArmFake { url, inner, task }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// The requests with this method whose path contains `path_contains` (case-insensitive).
    pub fn requests_to(&self, method: &str, path_contains: &str) -> Vec<Recorded> {
        let needle = path_contains.to_ascii_lowercase();
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.to_ascii_lowercase().contains(&needle))
            .collect()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// How many times an operation on a VM reports `InProgress` before it ends (others: once).
    pub fn set_vm_polls(&self, polls: u32) {
        self.lock().vm_polls = polls;
    }

    /// Marks a disk of [`RESOURCE_GROUP`] as attached to `vm_id`.
    pub fn attach(&self, disk: &str, vm_id: &str) {
        let key = (Kind::Disk, RESOURCE_GROUP.to_ascii_lowercase(), disk.to_ascii_lowercase());
        let mut inner = self.lock();
        let value = inner.resources.get_mut(&key).unwrap();
        value["managedBy"] = json!(vm_id);
        value["properties"]["diskState"] = json!("Attached");
    }

    /// The next `times` requests with `method` whose path contains `path_contains` get this ARM error.
    pub fn fail(&self, method: &str, path_contains: &str, times: u32, status: u16, code: &str, message: &str) {
        self.fail_with_retry_after(method, path_contains, times, status, code, message, None);
    }

    /// As [`Self::fail`], with a `Retry-After` header (seconds).
    #[allow(clippy::too_many_arguments)]
    pub fn fail_with_retry_after(
        &self,
        method: &str,
        path_contains: &str,
        times: u32,
        status: u16,
        code: &str,
        message: &str,
        retry_after: Option<u32>,
    ) {
        self.lock().faults.push(Fault {
            method: method.to_string(),
            path_contains: path_contains.to_ascii_lowercase(),
            remaining: times,
            answer: FaultAnswer::Http { status, code: code.into(), message: message.into(), retry_after },
        });
    }

    /// The next request with `method` whose path contains `path_contains` is accepted, and its operation fails.
    pub fn fail_operation(&self, method: &str, path_contains: &str, code: &str, message: &str) {
        self.lock().faults.push(Fault {
            method: method.to_string(),
            path_contains: path_contains.to_ascii_lowercase(),
            remaining: 1,
            answer: FaultAnswer::FailedOperation { code: code.into(), message: message.into() },
        });
    }

    /// The names of the resources of a kind in [`RESOURCE_GROUP`], sorted.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        let rg = RESOURCE_GROUP.to_ascii_lowercase();
        self.lock()
            .resources
            .iter()
            .filter(|((k, g, _), _)| *k == kind && *g == rg)
            .map(|(_, v)| v["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// A resource of [`RESOURCE_GROUP`] as ARM shows it.
    pub fn get(&self, kind: Kind, name: &str) -> Option<Value> {
        let key = (kind, RESOURCE_GROUP.to_ascii_lowercase(), name.to_ascii_lowercase());
        self.lock().resources.get(&key).cloned()
    }

    /// Puts a resource into [`RESOURCE_GROUP`] behind the driver's back (`properties`, `tags` as given), in state
    /// `Succeeded`.
    pub fn insert(&self, kind: Kind, name: &str, tags: Value, properties: Value) -> Value {
        let mut inner = self.lock();
        let id = resource_id(kind, RESOURCE_GROUP, name);
        let mut value = json!({"id": id, "name": name, "type": kind.type_name(), "location": LOCATION,
            "tags": tags, "properties": properties});
        value["properties"]["provisioningState"] = json!("Succeeded");
        if kind == Kind::Disk {
            value["properties"]["creationData"] = json!({"createOption": "Empty"});
            value["properties"]["diskState"] = json!("Unattached");
            value["sku"] = json!({"name": "Standard_LRS"});
        }
        inner.resources.insert((kind, RESOURCE_GROUP.to_ascii_lowercase(), name.to_ascii_lowercase()), value.clone());
        value
    }
}

fn resource_id(kind: Kind, rg: &str, name: &str) -> String {
    format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/{}/{name}", kind.type_name())
}

/// (kind, resource group, name) of a resource ID of this subscription, lower case.
fn parse_id(id: &str) -> Option<(Kind, String, String)> {
    let parts: Vec<&str> = id.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        [s, sub, g, rg, p, ns, kind, name]
            if s.eq_ignore_ascii_case("subscriptions")
                && sub.eq_ignore_ascii_case(SUBSCRIPTION)
                && g.eq_ignore_ascii_case("resourceGroups")
                && p.eq_ignore_ascii_case("providers") =>
        {
            Some((Kind::of(ns, kind)?, rg.to_ascii_lowercase(), name.to_ascii_lowercase()))
        }
        _ => None,
    }
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    let path = uri.path().to_string();
    let query = uri.query().unwrap_or_default().to_string();
    let mut inner = inner.lock().unwrap();
    let reply = answer(&mut inner, method.as_str(), &path, &query, authorization.as_deref(), &body);
    inner.requests.push(Recorded {
        method: method.to_string(),
        path,
        query,
        body: String::from_utf8_lossy(&body).into_owned(),
        authorization,
        status: reply.status,
    });
    let mut response =
        (StatusCode::from_u16(reply.status).unwrap(), [("content-type", "application/json")], reply.body)
            .into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            axum::http::HeaderValue::from_str(&value).unwrap(),
        );
    }
    response
}

fn answer(inner: &mut Inner, method: &str, path: &str, query: &str, auth: Option<&str>, body: &[u8]) -> Reply {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if let [tenant, "oauth2", "v2.0", "token"] = segments.as_slice() {
        return token(method, tenant, body);
    }
    if auth != Some(&format!("Bearer {TOKEN}")) {
        return Reply::error(
            401,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing.",
        );
    }
    if !query.split('&').any(|kv| kv.starts_with("api-version=") && kv.len() > "api-version=".len()) {
        return Reply::error(400, "MissingApiVersionParameter", "The api-version query parameter is required.");
    }
    let failed_operation = match take_fault(inner, method, path) {
        Some(FaultAnswer::Http { status, code, message, retry_after }) => {
            let reply = Reply::error(status, &code, &message);
            return match retry_after {
                Some(seconds) => reply.header("retry-after", seconds.to_string()),
                None => reply,
            };
        }
        Some(FaultAnswer::FailedOperation { code, message }) => Some((code, message)),
        None => None,
    };
    match segments.as_slice() {
        [s, sub, ..] if s.eq_ignore_ascii_case("subscriptions") && !sub.eq_ignore_ascii_case(SUBSCRIPTION) => {
            Reply::error(404, "SubscriptionNotFound", &format!("The subscription '{sub}' could not be found."))
        }
        [_, _, p, _ns, l, _loc, what, id]
            if p.eq_ignore_ascii_case("providers") && l.eq_ignore_ascii_case("locations") && method == "GET" =>
        {
            poll(inner, what, id, path, query)
        }
        [_, _, g, rg, p, ns, kind, rest @ ..]
            if g.eq_ignore_ascii_case("resourceGroups") && p.eq_ignore_ascii_case("providers") =>
        {
            let Some(kind) = Kind::of(ns, kind) else {
                return Reply::error(
                    404,
                    "InvalidResourceType",
                    &format!("The resource type '{kind}' could not be found."),
                );
            };
            if !inner.groups.contains(&rg.to_ascii_lowercase()) {
                return Reply::error(
                    404,
                    "ResourceGroupNotFound",
                    &format!("Resource group '{rg}' could not be found."),
                );
            }
            match (method, rest) {
                ("GET", []) => list(inner, kind, rg, path, query),
                ("GET", [name]) => {
                    match inner.resources.get(&(kind, rg.to_ascii_lowercase(), name.to_ascii_lowercase())) {
                        Some(value) => Reply::json(200, value.clone()),
                        None => not_found(kind, rg, name),
                    }
                }
                ("PUT", [name]) => match serde_json::from_slice::<Value>(body) {
                    Ok(body) => put(inner, kind, rg, name, body, failed_operation),
                    Err(e) => {
                        Reply::error(400, "InvalidRequestContent", &format!("The request content was invalid: {e}"))
                    }
                },
                ("DELETE", [name]) => delete(inner, kind, rg, name, failed_operation),
                _ => Reply::error(405, "MethodNotAllowed", "The fake does not serve this method here."),
            }
        }
        _ => Reply::error(404, "NoRegisteredProviderFound", &format!("No registered resource provider for {path}.")),
    }
}

fn take_fault(inner: &mut Inner, method: &str, path: &str) -> Option<FaultAnswer> {
    let path = path.to_ascii_lowercase();
    let fault =
        inner.faults.iter_mut().find(|f| f.remaining > 0 && f.method == method && path.contains(&f.path_contains))?;
    fault.remaining -= 1;
    Some(fault.answer.clone())
}

fn not_found(kind: Kind, rg: &str, name: &str) -> Reply {
    Reply::error(
        404,
        "ResourceNotFound",
        &format!("The Resource '{}/{name}' under resource group '{rg}' was not found.", kind.type_name()),
    )
}

/// The OAuth 2 client-credentials grant of Microsoft Entra ID (v2.0 endpoint).
fn token(method: &str, tenant: &str, body: &[u8]) -> Reply {
    if method != "POST" {
        return Reply::error(405, "MethodNotAllowed", "POST only");
    }
    let form: HashMap<String, String> =
        match azure_core::Url::parse(&format!("http://form/?{}", String::from_utf8_lossy(body))) {
            Ok(url) => url.query_pairs().into_owned().collect(),
            Err(_) => HashMap::new(),
        };
    let field = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
    if tenant != TENANT {
        return Reply::json(
            400,
            json!({"error": "invalid_request",
            "error_description": format!("AADSTS90002: Tenant '{tenant}' not found.")}),
        );
    }
    if field("grant_type") != "client_credentials" || !field("scope").ends_with("/.default") {
        return Reply::json(400, json!({"error": "invalid_request", "error_description": "AADSTS900144: bad grant"}));
    }
    if field("client_id") != CLIENT_ID || field("client_secret") != CLIENT_SECRET {
        return Reply::json(
            401,
            json!({"error": "invalid_client",
            "error_description": "AADSTS7000215: Invalid client secret provided."}),
        );
    }
    Reply::json(200, json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": TOKEN}))
}

fn list(inner: &Inner, kind: Kind, rg: &str, path: &str, query: &str) -> Reply {
    const PAGE: usize = 2;
    let skip: usize = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("$skiptoken=").or_else(|| kv.strip_prefix("%24skiptoken=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rg = rg.to_ascii_lowercase();
    let all: Vec<&Value> =
        inner.resources.iter().filter(|((k, g, _), _)| *k == kind && *g == rg).map(|(_, v)| v).collect();
    let page: Vec<Value> = all.iter().skip(skip).take(PAGE).map(|v| (*v).clone()).collect();
    let mut body = json!({"value": page});
    if skip + PAGE < all.len() {
        let api = query.split('&').find(|kv| kv.starts_with("api-version=")).unwrap_or_default();
        body["nextLink"] = json!(format!("{}{path}?{api}&$skiptoken={}", inner.base, skip + PAGE));
    }
    Reply::json(200, body)
}

fn start_operation(inner: &mut Inner, kind: Kind, effect: Effect, error: Option<(String, String)>) -> String {
    inner.next_op += 1;
    let id = format!("{:08x}-0000-4000-8000-{:012x}", inner.next_op, inner.next_op);
    let polls_left = if kind == Kind::Vm { inner.vm_polls } else { inner.polls };
    inner.operations.insert(id.clone(), Operation { polls_left, effect, error, done: false });
    id
}

fn operation_urls(inner: &Inner, kind: Kind, id: &str) -> (String, String) {
    let base =
        format!("{}/subscriptions/{SUBSCRIPTION}/providers/{}/locations/{LOCATION}", inner.base, kind.namespace());
    (
        format!("{base}/operations/{id}?api-version=2024-07-01"),
        format!("{base}/operationResults/{id}?api-version=2024-07-01"),
    )
}

fn put(inner: &mut Inner, kind: Kind, rg: &str, name: &str, body: Value, failed: Option<(String, String)>) -> Reply {
    let key = (kind, rg.to_ascii_lowercase(), name.to_ascii_lowercase());
    let id = resource_id(kind, rg, name);
    let Some(location) = body["location"].as_str().filter(|l| !l.is_empty()) else {
        return Reply::error(400, "LocationRequired", "The location property is required for this definition.");
    };
    let mut value = json!({"id": id, "name": name, "type": kind.type_name(), "location": location,
        "tags": body.get("tags").cloned().unwrap_or(json!({})), "properties": body["properties"].clone()});
    match kind {
        Kind::Nic => {
            let Some(configs) = value["properties"]["ipConfigurations"].as_array_mut() else {
                return Reply::error(400, "InvalidRequestFormat", "ipConfigurations is required.");
            };
            for config in configs.iter_mut() {
                let subnet = config["properties"]["subnet"]["id"].as_str().unwrap_or_default().to_ascii_lowercase();
                if !inner.subnets.contains(&subnet) {
                    return Reply::error(
                        400,
                        "InvalidResourceReference",
                        &format!("Resource {subnet} referenced by resource {id} was not found."),
                    );
                }
                let config_name = config["name"].as_str().unwrap_or("ipconfig1").to_string();
                inner.next_ip += 1;
                config["id"] = json!(format!("{id}/ipConfigurations/{config_name}"));
                config["properties"]["privateIPAddress"] = json!(format!("10.250.0.{}", inner.next_ip));
                config["properties"]["provisioningState"] = json!("Succeeded");
                config["properties"]["primary"] = json!(true);
            }
            value["etag"] = json!("W/\"00000000-0000-0000-0000-000000000001\"");
            value["properties"]["provisioningState"] = json!("Updating");
        }
        Kind::Vm => {
            if let Err(reply) = check_vm(inner, &body) {
                return reply;
            }
            if let Some(zones) = body.get("zones") {
                value["zones"] = zones.clone();
            }
            if let Some(identity) = body.get("identity") {
                value["identity"] = identity.clone();
            }
            let props = &mut value["properties"];
            // ARM never answers with the custom data.
            if let Some(os) = props["osProfile"].as_object_mut() {
                os.remove("customData");
            }
            props["provisioningState"] = json!("Creating");
            props["vmId"] = json!(format!("{:08x}-0000-4000-8000-000000000000", inner.next_op));
            props["timeCreated"] = json!("2026-12-03T00:00:00Z");
            attach_disks(inner, &mut value, rg);
            for nic in
                value["properties"]["networkProfile"]["networkInterfaces"].as_array().cloned().unwrap_or_default()
            {
                if let Some(n) = nic["id"].as_str().and_then(parse_id).and_then(|k| inner.resources.get_mut(&k)) {
                    n["properties"]["virtualMachine"] = json!({"id": id});
                }
            }
        }
        Kind::Disk => return Reply::error(405, "MethodNotAllowed", "The driver never PUTs a disk."),
    }
    let existed = inner.resources.contains_key(&key);
    inner.resources.insert(key, value.clone());
    let effect = match &failed {
        Some(_) => Effect::ProvisioningFailed(id.clone()),
        None => Effect::Provisioned(id.clone()),
    };
    let op = start_operation(inner, kind, effect, failed);
    let (async_url, _) = operation_urls(inner, kind, &op);
    Reply::json(if existed { 200 } else { 201 }, value).header("azure-asyncoperation", async_url)
}

/// A VM PUT's checks: the fields ARM insists on, and an existing NIC.
fn check_vm(inner: &Inner, body: &Value) -> Result<(), Reply> {
    let p = &body["properties"];
    for (pointer, what) in [
        ("/hardwareProfile/vmSize", "hardwareProfile.vmSize"),
        ("/storageProfile/imageReference", "storageProfile.imageReference"),
        ("/osProfile/adminUsername", "osProfile.adminUsername"),
        ("/networkProfile/networkInterfaces/0/id", "networkProfile.networkInterfaces"),
    ] {
        if p.pointer(pointer).is_none_or(Value::is_null) {
            return Err(Reply::error(
                400,
                "InvalidParameter",
                &format!("Required parameter '{what}' is missing (null)."),
            ));
        }
    }
    let nic = p["networkProfile"]["networkInterfaces"][0]["id"].as_str().unwrap_or_default();
    match parse_id(nic) {
        Some(key) if inner.resources.contains_key(&key) => Ok(()),
        _ => Err(Reply::error(
            400,
            "InvalidResourceReference",
            &format!("Resource {nic} referenced by the virtual machine was not found."),
        )),
    }
}

/// Creates the VM's managed disks (as Azure does: untagged, attached) and fills in their IDs.
fn attach_disks(inner: &mut Inner, vm: &mut Value, rg: &str) {
    let vm_id = vm["id"].as_str().unwrap_or_default().to_string();
    let location = vm["location"].clone();
    let storage = &mut vm["properties"]["storageProfile"];
    let storage = storage.as_object_mut();
    let mut disks: Vec<&mut Value> = Vec::new();
    if let Some(storage) = storage {
        for (key, value) in storage.iter_mut() {
            match (key.as_str(), value) {
                ("osDisk", disk @ Value::Object(_)) => disks.push(disk),
                ("dataDisks", Value::Array(data)) => disks.extend(data.iter_mut()),
                _ => {}
            }
        }
    }
    for disk in disks {
        let name = disk["name"].as_str().unwrap_or("disk").to_string();
        let id = resource_id(Kind::Disk, rg, &name);
        let sku = disk["managedDisk"]["storageAccountType"].as_str().unwrap_or("Standard_LRS").to_string();
        disk["managedDisk"]["id"] = json!(id);
        let create = if disk.get("lun").is_some() { "Empty" } else { "FromImage" };
        inner.resources.insert(
            (Kind::Disk, rg.to_ascii_lowercase(), name.to_ascii_lowercase()),
            json!({"id": id, "name": name, "type": Kind::Disk.type_name(), "location": location,
                "managedBy": vm_id, "sku": {"name": sku},
                "properties": {"creationData": {"createOption": create}, "diskSizeGB": disk["diskSizeGB"],
                    "diskState": "Attached", "provisioningState": "Succeeded"}}),
        );
    }
}

fn delete(inner: &mut Inner, kind: Kind, rg: &str, name: &str, failed: Option<(String, String)>) -> Reply {
    let key = (kind, rg.to_ascii_lowercase(), name.to_ascii_lowercase());
    let Some(value) = inner.resources.get_mut(&key) else {
        return Reply::empty(204);
    };
    let id = value["id"].as_str().unwrap_or_default().to_string();
    match kind {
        Kind::Nic if !value["properties"]["virtualMachine"].is_null() => {
            return Reply::error(
                400,
                "NicInUse",
                &format!(
                    "Network Interface {id} is used by existing resource {}.",
                    value["properties"]["virtualMachine"]["id"]
                ),
            );
        }
        Kind::Disk if value["managedBy"].as_str().is_some_and(|m| !m.is_empty()) => {
            return Reply::error(
                409,
                "OperationNotAllowed",
                &format!("Disk {name} is attached to VM {}.", value["managedBy"]),
            );
        }
        _ => {}
    }
    value["properties"]["provisioningState"] = json!("Deleting");
    let effect = if failed.is_some() { Effect::Nothing } else { Effect::Deleted(kind, id) };
    let op = start_operation(inner, kind, effect, failed);
    let (async_url, location) = operation_urls(inner, kind, &op);
    let reply = Reply::empty(202).header("location", location);
    // Disks answer with Location only, so both ways of polling are exercised.
    if kind == Kind::Disk { reply } else { reply.header("azure-asyncoperation", async_url) }
}

fn poll(inner: &mut Inner, what: &str, id: &str, path: &str, query: &str) -> Reply {
    let Some(op) = inner.operations.get_mut(id) else {
        return Reply::error(404, "NotFound", &format!("Operation {id} was not found."));
    };
    let by_location = what.eq_ignore_ascii_case("operationResults");
    if !op.done && op.polls_left > 0 {
        op.polls_left -= 1;
        return if by_location {
            Reply::empty(202).header("location", format!("{}{path}?{query}", inner.base))
        } else {
            Reply::json(200, json!({"name": id, "status": "InProgress", "startTime": "2026-12-03T00:00:00Z"}))
        };
    }
    let first_time = !op.done;
    op.done = true;
    let (effect, error) = (op.effect.clone(), op.error.clone());
    if first_time {
        finish(inner, effect);
    }
    match (error, by_location) {
        (Some((code, message)), false) => Reply::json(
            200,
            json!({"name": id, "status": "Failed", "startTime": "2026-12-03T00:00:00Z",
                "error": {"code": code, "message": message}}),
        ),
        (Some((code, message)), true) => Reply::error(409, &code, &message),
        (None, false) => {
            Reply::json(200, json!({"name": id, "status": "Succeeded", "startTime": "2026-12-03T00:00:00Z"}))
        }
        (None, true) => Reply::empty(200),
    }
}

fn finish(inner: &mut Inner, effect: Effect) {
    match effect {
        Effect::Provisioned(id) => set_state(inner, &id, "Succeeded"),
        Effect::ProvisioningFailed(id) => set_state(inner, &id, "Failed"),
        Effect::Deleted(kind, id) => {
            let Some(key) = parse_id(&id) else { return };
            let Some(removed) = inner.resources.remove(&key) else { return };
            if kind == Kind::Vm {
                release(inner, &removed);
            }
        }
        Effect::Nothing => {}
    }
}

fn set_state(inner: &mut Inner, id: &str, state: &str) {
    if let Some(value) = parse_id(id).and_then(|key| inner.resources.get_mut(&key)) {
        value["properties"]["provisioningState"] = json!(state);
    }
}

/// What a deleted VM leaves: NICs and disks with `deleteOption: Delete` go with it, the others are detached.
fn release(inner: &mut Inner, vm: &Value) {
    let props = &vm["properties"];
    for nic in props["networkProfile"]["networkInterfaces"].as_array().into_iter().flatten() {
        let Some(key) = nic["id"].as_str().and_then(parse_id) else { continue };
        if nic["properties"]["deleteOption"] == "Delete" {
            inner.resources.remove(&key);
        } else if let Some(n) = inner.resources.get_mut(&key) {
            n["properties"].as_object_mut().map(|p| p.remove("virtualMachine"));
        }
    }
    let storage = &props["storageProfile"];
    let disks = std::iter::once(&storage["osDisk"]).chain(storage["dataDisks"].as_array().into_iter().flatten());
    for disk in disks {
        let Some(key) = disk["managedDisk"]["id"].as_str().and_then(parse_id) else { continue };
        if disk["deleteOption"] == "Delete" {
            inner.resources.remove(&key);
        } else if let Some(d) = inner.resources.get_mut(&key) {
            d.as_object_mut().map(|o| o.remove("managedBy"));
            d["properties"]["diskState"] = json!("Unattached");
        }
    }
}
