//! The GCP driver against the local Compute fake (`gcp_fake.rs`, one per test on 127.0.0.1): the conformance
//! suite, the request bodies, operation polling, listing, deletion without leaked disks, error mapping, and the
//! service-account key kept out of errors and logs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcm::providers::conformance::{self, Fixture};
use mcm::providers::gcp::{GcpDriver, GcpSettings, PROVIDER};
use mcm::providers::{ClassInfo, Code, Driver, ListMachinesRequest, MachineInfo, MachineRequest, SecretData};
use serde_json::{Value, json};

use super::gcp_fake::{ComputeFake, Fault};

pub(super) const PROJECT: &str = "mcm-test-project";
pub(super) const ZONE: &str = "europe-west1-b";
pub(super) const USER_DATA: &str = "#cloud-config\n# gcp-fake-test-user-data";

/// Short polls and back-offs, so failing calls and operations end quickly.
fn settings() -> GcpSettings {
    GcpSettings {
        operation_timeout: Duration::from_secs(10),
        operation_first_poll: Duration::from_millis(10),
        operation_max_poll: Duration::from_millis(40),
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        attempt_timeout: Duration::from_secs(10),
    }
}

/// A driver talking to `fake` without credentials.
fn anonymous_driver(fake: &ComputeFake) -> GcpDriver {
    GcpDriver::with_endpoint(&fake.url).with_anonymous_credentials().with_settings(settings())
}

pub(super) fn spec(cluster: &str) -> Value {
    json!({
        "region": "europe-west1",
        "zone": ZONE,
        "machineType": "n2-standard-2",
        "disks": [
            {"boot": true, "sizeGb": 50, "type": "pd-balanced", "image": "projects/debian-cloud/global/images/family/debian-12",
             "labels": {"name": "worker"}},
            {"sizeGb": 100, "type": "pd-ssd", "autoDelete": true}
        ],
        "labels": {"name": cluster, "pool": "worker"},
        "metadata": [{"key": "block-project-ssh-keys", "value": "true"}],
        "networkInterfaces": [{"network": "shoot-net", "subnetwork": "shoot-nodes"}],
        "serviceAccounts": [{"email": "nodes@mcm-test-project.iam.gserviceaccount.com",
                             "scopes": ["https://www.googleapis.com/auth/compute"]}],
        "tags": [format!("kubernetes-io-cluster-{cluster}"), "kubernetes-io-role-node", cluster]
    })
}

fn class(name: &str, spec: Value) -> ClassInfo {
    ClassInfo { name: name.into(), provider: PROVIDER.into(), provider_spec: spec, node_template: None }
}

/// The anonymous driver's secret: the project, the user data, and a key the anonymous driver never uses (its
/// values must still never show in an error).
fn secret() -> SecretData {
    let key = json!({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "fa4e1d2c",
        "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEfakeCOMPUTEtestKEYmaterialNEVERshown0123456789\n-----END PRIVATE KEY-----\n",
        "client_email": "mcm@mcm-test-project.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token"
    });
    SecretData(
        [
            ("serviceAccountJSON".to_string(), key.to_string().into_bytes()),
            ("userData".to_string(), USER_DATA.as_bytes().to_vec()),
        ]
        .into(),
    )
}

fn request(name: &str, class: &ClassInfo, provider_id: Option<&str>, secret: &SecretData) -> MachineRequest {
    MachineRequest {
        machine: MachineInfo {
            name: name.into(),
            namespace: "shoot--dev".into(),
            provider_id: provider_id.map(str::to_string),
            ..Default::default()
        },
        class: class.clone(),
        secret: secret.clone(),
        last_known_state: None,
    }
}

#[tokio::test]
async fn the_gcp_driver_passes_the_conformance_suite() {
    let fake = ComputeFake::start(2).await;
    let driver = anonymous_driver(&fake);
    let mut invalid = spec("dev");
    invalid.as_object_mut().unwrap().remove("machineType");
    let mut wrong_provider = class("aws", spec("dev"));
    wrong_provider.provider = "AWS".into();
    let fixture = Fixture {
        class: class("dev", spec("dev")),
        other_cluster_class: class("other", spec("other")),
        invalid_class: class("invalid", invalid),
        invalid_field: "providerSpec.machineType".into(),
        wrong_provider_class: wrong_provider,
        secret: secret(),
        namespace: "shoot--dev".into(),
        machine_prefix: "conformance".into(),
        absent_provider_id: Some(format!("gce://{PROJECT}/{ZONE}/conformance-never")),
    };
    conformance::run(&driver, &fixture).await.unwrap();
    assert!(fake.instances(PROJECT, ZONE).is_empty(), "the suite deletes what it creates");
    assert!(fake.disks().is_empty(), "leaked disks: {:?}", fake.disks());
    let requests = fake.requests();
    for (method, suffix) in [("POST", "/instances"), ("DELETE", ""), ("GET", "/instances")] {
        assert!(
            requests.iter().any(|r| r.method == method && r.path.ends_with(suffix)),
            "no {method} …{suffix} among {} requests",
            requests.len()
        );
    }
    assert!(requests.iter().all(|r| r.authorization.is_none()), "anonymous credentials send no Authorization");
}

#[tokio::test]
async fn create_sends_gardeners_instance_and_waits_for_the_operation() {
    let fake = ComputeFake::start(3).await;
    let driver = anonymous_driver(&fake);
    let dev = class("dev", spec("dev"));
    let created = driver.create_machine(&request("shoot-dev-worker-1", &dev, None, &secret())).await.unwrap();
    assert_eq!(created.provider_id, format!("gce://{PROJECT}/{ZONE}/shoot-dev-worker-1"));
    assert_eq!(created.node_name, "shoot-dev-worker-1");
    let addresses: Vec<(String, String)> =
        created.addresses.iter().map(|a| (a.type_.clone(), a.address.clone())).collect();
    assert_eq!(addresses.len(), 2, "{addresses:?}");
    assert_eq!(addresses[0].0, "InternalIP");
    assert_eq!(addresses[1].0, "ExternalIP");

    let requests = fake.requests();
    let inserts: Vec<_> = requests.iter().filter(|r| r.is("POST", "/instances")).collect();
    assert_eq!(inserts.len(), 1);
    assert_eq!(inserts[0].path, format!("/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"));
    let body = &inserts[0].body;
    assert_eq!(body["name"], "shoot-dev-worker-1");
    assert_eq!(body["machineType"], format!("zones/{ZONE}/machineTypes/n2-standard-2"));
    assert_eq!(
        body["disks"],
        json!([
            {"type": "PERSISTENT", "boot": true, "autoDelete": true, "initializeParams": {
                "diskType": format!("zones/{ZONE}/diskTypes/pd-balanced"), "diskSizeGb": "50",
                "sourceImage": "projects/debian-cloud/global/images/family/debian-12", "labels": {"name": "worker"}}},
            {"type": "PERSISTENT", "boot": false, "autoDelete": true, "initializeParams": {
                "diskType": format!("zones/{ZONE}/diskTypes/pd-ssd"), "diskSizeGb": "100"}}
        ])
    );
    assert_eq!(body["labels"], json!({"name": "dev", "pool": "worker"}));
    assert_eq!(
        body["metadata"]["items"],
        json!([{"key": "user-data", "value": USER_DATA}, {"key": "block-project-ssh-keys", "value": "true"}])
    );
    assert_eq!(
        body["networkInterfaces"],
        json!([{"network": format!("projects/{PROJECT}/global/networks/shoot-net"),
                "subnetwork": "regions/europe-west1/subnetworks/shoot-nodes",
                "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}])
    );
    assert_eq!(body["tags"]["items"], json!(["kubernetes-io-cluster-dev", "kubernetes-io-role-node", "dev"]));
    assert_eq!(body["serviceAccounts"][0]["email"], "nodes@mcm-test-project.iam.gserviceaccount.com");

    // The driver polled the zone operation until DONE: 3 polls, and the instance it answered with is RUNNING.
    let polls: Vec<_> = requests.iter().filter(|r| r.method == "GET" && r.path.contains("/operations/")).collect();
    assert_eq!(polls.len(), 3, "{:?}", polls.iter().map(|r| &r.path).collect::<Vec<_>>());
    assert!(
        polls
            .iter()
            .all(|r| r.path.starts_with(&format!("/compute/v1/projects/{PROJECT}/zones/{ZONE}/operations/operation-")))
    );
    assert_eq!(fake.instances(PROJECT, ZONE)["shoot-dev-worker-1"]["status"], "RUNNING");

    // A second create inserts nothing.
    fake.clear_requests();
    let again = driver.create_machine(&request("shoot-dev-worker-1", &dev, None, &secret())).await.unwrap();
    assert_eq!(again.provider_id, created.provider_id);
    assert!(!fake.requests().iter().any(|r| r.method == "POST"), "{:?}", fake.requests());
    // A script goes to startup-script.
    let mut script = secret();
    script.0.insert("userData".into(), b"#!/bin/bash\necho gcp-fake".to_vec());
    driver.create_machine(&request("shoot-dev-worker-2", &dev, None, &script)).await.unwrap();
    let body = fake.requests().into_iter().find(|r| r.is("POST", "/instances")).unwrap().body;
    assert_eq!(body["metadata"]["items"][0], json!({"key": "startup-script", "value": "#!/bin/bash\necho gcp-fake"}));
}

#[tokio::test]
async fn an_operation_that_never_finishes_ends_the_wait_and_the_retry_finds_the_instance() {
    let fake = ComputeFake::start(u32::MAX).await;
    let settings = GcpSettings { operation_timeout: Duration::from_millis(300), ..settings() };
    let driver = GcpDriver::with_endpoint(&fake.url).with_anonymous_credentials().with_settings(settings);
    let dev = class("dev", spec("dev"));
    let err = driver.create_machine(&request("slow", &dev, None, &secret())).await.unwrap_err();
    assert_eq!(err.code, Code::DeadlineExceeded, "{err}");
    assert!(err.message.contains("still runs"), "{err}");
    // Pauses of 10, 20, then 40 ms, adding up to at most 300 ms: 8 polls.
    let polls = fake.requests().iter().filter(|r| r.path.contains("/operations/")).count();
    assert_eq!(polls, 8);
    let created = driver.create_machine(&request("slow", &dev, None, &secret())).await.unwrap();
    assert_eq!(created.provider_id, format!("gce://{PROJECT}/{ZONE}/slow"));
    assert_eq!(fake.requests().iter().filter(|r| r.is("POST", "/instances")).count(), 1, "one insert");
}

#[tokio::test]
async fn list_pages_and_keeps_to_the_cluster_and_role_tags() {
    let fake = ComputeFake::start(0).await;
    fake.set_page_size(2);
    let driver = anonymous_driver(&fake);
    let dev = class("dev", spec("dev"));
    for name in ["w-1", "w-2", "w-3"] {
        driver.create_machine(&request(name, &dev, None, &secret())).await.unwrap();
    }
    fake.seed_instance(PROJECT, ZONE, "untagged", &[]);
    fake.seed_instance(PROJECT, ZONE, "other-cluster", &["kubernetes-io-cluster-other", "kubernetes-io-role-node"]);
    fake.seed_instance(PROJECT, ZONE, "no-role", &["kubernetes-io-cluster-dev"]);
    fake.seed_instance(PROJECT, ZONE, "other-role", &["kubernetes-io-cluster-dev", "kubernetes-io-role-bastion"]);
    fake.clear_requests();
    let listed = driver.list_machines(&ListMachinesRequest { class: dev.clone(), secret: secret() }).await.unwrap();
    let want: Vec<(String, String)> =
        ["w-1", "w-2", "w-3"].iter().map(|n| (format!("gce://{PROJECT}/{ZONE}/{n}"), n.to_string())).collect();
    assert_eq!(listed.into_iter().collect::<Vec<_>>(), want);
    let pages: Vec<String> =
        fake.requests().into_iter().filter(|r| r.is("GET", "/instances")).map(|r| r.query).collect();
    assert_eq!(pages.len(), 4, "7 instances, 2 a page: {pages:?}");
    assert!(pages[1..].iter().all(|q| q.contains("pageToken=")), "{pages:?}");

    // Foreign instances are neither found, nor adopted, nor deleted.
    for name in ["untagged", "other-cluster", "no-role"] {
        let by_name = request(name, &dev, None, &secret());
        assert_eq!(driver.get_machine_status(&by_name).await.unwrap_err().code, Code::NotFound, "{name}");
        let by_id = request(name, &dev, Some(&format!("gce://{PROJECT}/{ZONE}/{name}")), &secret());
        let _ = driver.delete_machine(&by_id).await;
        assert!(driver.create_machine(&by_name).await.is_err(), "{name} must not be adopted");
    }
    assert!(!fake.requests().iter().any(|r| r.method == "DELETE"), "a foreign instance was deleted");
    assert_eq!(fake.instances(PROJECT, ZONE).len(), 7);
}

#[tokio::test]
async fn delete_is_idempotent_and_leaks_no_disks() {
    let fake = ComputeFake::start(2).await;
    let driver = anonymous_driver(&fake);
    let dev = class("dev", spec("dev"));
    let created = driver.create_machine(&request("w-1", &dev, None, &secret())).await.unwrap();
    assert_eq!(fake.disks(), ["w-1", "w-1-disk-1"]);
    let by_id = request("w-1", &dev, Some(&created.provider_id), &secret());
    driver.delete_machine(&by_id).await.unwrap();
    assert!(fake.instances(PROJECT, ZONE).is_empty());
    assert!(fake.disks().is_empty(), "leaked: {:?}", fake.disks());
    let polls = fake.requests().iter().filter(|r| r.path.contains("/operations/")).count();
    assert_eq!(polls, 4, "two polls for the insert, two for the delete");
    driver.delete_machine(&by_id).await.unwrap();
    driver.delete_machine(&request("w-1", &dev, None, &secret())).await.unwrap();
    // Gone between the get and the delete: a 404 on DELETE is done too.
    driver.create_machine(&request("w-2", &dev, None, &secret())).await.unwrap();
    fake.fail(Fault {
        method: "DELETE",
        path_contains: "/instances/w-2".into(),
        status: 404,
        reason: "notFound",
        message: format!("The resource 'projects/{PROJECT}/zones/{ZONE}/instances/w-2' was not found"),
        times: 1,
    });
    driver.delete_machine(&request("w-2", &dev, None, &secret())).await.unwrap();
}

#[tokio::test]
async fn compute_errors_map_to_mcm_codes() {
    let fake = ComputeFake::start(1).await;
    let driver = anonymous_driver(&fake);
    let dev = class("dev", spec("dev"));
    let insert = |status, reason, message: &str, times| Fault {
        method: "POST",
        path_contains: "/instances".into(),
        status,
        reason,
        message: message.into(),
        times,
    };
    // name, a fault of the insert call, an error of its operation (code, message), the code, text of the message
    type Case<'a> = (&'a str, Option<Fault>, Option<(&'a str, &'a str)>, Code, &'a str);
    let cases: Vec<Case> = vec![
        (
            "quota",
            Some(insert(403, "quotaExceeded", "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west1.", 1)),
            None,
            Code::ResourceExhausted,
            "CPUS",
        ),
        (
            "machine type not in zone",
            Some(insert(
                400,
                "invalid",
                "Invalid value for field 'resource.machineType': machine type n2-standard-2 does not exist in zone europe-west1-b.",
                1,
            )),
            None,
            Code::ResourceExhausted,
            "does not exist in zone",
        ),
        (
            "zone exhausted",
            None,
            Some((
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                "The zone 'projects/p/zones/europe-west1-b' does not have enough resources available to fulfill the request.",
            )),
            Code::ResourceExhausted,
            "ZONE_RESOURCE_POOL_EXHAUSTED",
        ),
        (
            "quota in the operation",
            None,
            Some(("QUOTA_EXCEEDED", "Quota 'SSD_TOTAL_GB' exceeded.")),
            Code::ResourceExhausted,
            "SSD_TOTAL_GB",
        ),
        ("throttled", Some(insert(429, "rateLimitExceeded", "Rate Limit Exceeded", 5)), None, Code::Unavailable, "429"),
        ("unavailable", Some(insert(503, "backendError", "Backend Error", 5)), None, Code::Unavailable, "503"),
        (
            "permission",
            Some(insert(403, "forbidden", "Required 'compute.instances.create' permission", 1)),
            None,
            Code::PermissionDenied,
            "compute.instances.create",
        ),
        (
            "unauthenticated",
            Some(insert(401, "authError", "Invalid Credentials", 1)),
            None,
            Code::Unauthenticated,
            "serviceAccountJSON",
        ),
        (
            "bad image",
            None,
            Some(("RESOURCE_NOT_FOUND", "The resource 'projects/debian-cloud/global/images/x' was not found")),
            Code::NotFound,
            "RESOURCE_NOT_FOUND",
        ),
        (
            "other",
            Some(insert(400, "invalid", "Invalid value for field 'resource.labels'", 1)),
            None,
            Code::Internal,
            "invalid",
        ),
    ];
    for (i, (name, fault, op_error, want, shown)) in cases.into_iter().enumerate() {
        if let Some(fault) = fault {
            fake.fail(fault);
        }
        if let Some((code, message)) = op_error {
            fake.fail_next_insert_operation(code, message);
        }
        let err = driver.create_machine(&request(&format!("err-{i}"), &dev, None, &secret())).await.unwrap_err();
        assert_eq!(err.code, want, "{name}: {err}");
        assert!(err.message.contains(shown), "{name}: {:?} should contain {shown:?}", err.message);
        assert!(!err.message.contains("MIIEfake"), "{name}: {err}");
        fake.clear_faults();
    }
    // Throttling and 503s are retried: one 429 and one 503, then the insert goes through.
    fake.fail(insert(429, "rateLimitExceeded", "Rate Limit Exceeded", 1));
    fake.fail(insert(503, "backendError", "Backend Error", 1));
    fake.clear_requests();
    driver.create_machine(&request("retried", &dev, None, &secret())).await.unwrap();
    assert_eq!(fake.requests().iter().filter(|r| r.is("POST", "/instances")).count(), 3);
    // A failed poll of the operation is waited out when transient.
    fake.fail(Fault {
        method: "GET",
        path_contains: "/operations/".into(),
        status: 503,
        reason: "backendError",
        message: "Backend Error".into(),
        times: 1,
    });
    driver.delete_machine(&request("retried", &dev, None, &secret())).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(fake.instances(PROJECT, ZONE).is_empty(), "{:?}", fake.instances(PROJECT, ZONE).keys());
}

/// A `tracing` writer that keeps everything written, to search the logs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// A service-account key (JSON) with a freshly generated RSA key (PEM, also returned), its token endpoint on the
/// fake.
pub(super) fn service_account_key(fake: &ComputeFake) -> (String, String) {
    let key_pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
    let pem = key_pair.serialize_pem();
    let key = json!({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "0a1b2c3d4e5f",
        "private_key": pem, "client_email": "mcm@mcm-test-project.iam.gserviceaccount.com", "client_id": "42",
        "token_uri": format!("{}/token", fake.url)
    })
    .to_string();
    (key, pem)
}

/// A real (freshly generated) service-account key: the driver signs its own tokens with it and the fake sees a
/// bearer token, while the key itself shows in no error and no log line.
#[tokio::test]
async fn a_service_account_key_signs_requests_and_never_shows() {
    let fake = ComputeFake::start(1).await;
    let (key, pem) = service_account_key(&fake);
    let secret = SecretData(
        [
            ("serviceAccountJSON".to_string(), key.clone().into_bytes()),
            ("userData".to_string(), USER_DATA.as_bytes().to_vec()),
        ]
        .into(),
    );
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_writer(logs.clone()).finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let driver = GcpDriver::with_endpoint(&fake.url).with_settings(settings());
    let dev = class("dev", spec("dev"));
    let created = driver.create_machine(&request("w-1", &dev, None, &secret)).await.unwrap();
    let auth = fake.requests().iter().filter_map(|r| r.authorization.clone()).next().expect("an Authorization header");
    assert!(auth.starts_with("Bearer ") && auth.len() > 20, "{auth}");
    fake.fail(Fault {
        method: "GET",
        path_contains: "/instances/w-1".into(),
        status: 401,
        reason: "authError",
        message: format!("Invalid Credentials for key {key}"),
        times: 1,
    });
    let err = driver.get_machine_status(&request("w-1", &dev, Some(&created.provider_id), &secret)).await.unwrap_err();
    assert_eq!(err.code, Code::Unauthenticated, "{err}");
    assert!(err.message.contains("serviceAccountJSON"), "{err}");
    let mut broken = secret.clone();
    broken.0.insert(
        "serviceAccountJSON".into(),
        key.replace("\"type\":\"service_account\"", "\"type\":\"service_account\",\"x\":1").into_bytes(),
    );
    let invalid = driver.list_machines(&ListMachinesRequest { class: dev.clone(), secret: broken }).await.unwrap_err();
    assert_eq!(invalid.code, Code::InvalidArgument, "{invalid}");
    driver.delete_machine(&request("w-1", &dev, Some(&created.provider_id), &secret)).await.unwrap();

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let key_lines: Vec<&str> = pem.lines().filter(|l| l.len() > 20 && !l.starts_with("-----")).collect();
    assert!(!key_lines.is_empty());
    for (what, text) in
        [("error", format!("{err} {err:?}")), ("invalid-key error", format!("{invalid} {invalid:?}")), ("logs", logs)]
    {
        for line in &key_lines {
            assert!(!text.contains(line), "{what} show the private key");
        }
        assert!(!text.contains(USER_DATA), "{what} show the user data");
        assert!(!text.contains(&auth["Bearer ".len()..]), "{what} show the bearer token");
    }
}
