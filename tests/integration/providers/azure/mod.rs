//! The Azure driver against a local ARM fake ([`fake::ArmFake`], one per test, on 127.0.0.1): the conformance
//! suite, the request bodies, clean-up of NICs and disks, throttling, quota and failed operations, and secrets that
//! never show in errors or logs.

pub(super) mod fake;
pub(super) mod machines;
mod run;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use mcm::providers::azure::{AzureDriver, AzureSettings, PROVIDER};
use mcm::providers::conformance::{self, Fixture};
use mcm::providers::{
    ClassInfo, Code, Driver, DriverError, ListMachinesRequest, MachineInfo, MachineRequest, SecretData,
};
use serde_json::{Value, json};

use fake::{ArmFake, CLIENT_ID, CLIENT_SECRET, Kind, RESOURCE_GROUP, SUBSCRIPTION, TENANT, TOKEN};

pub(super) const USER_DATA: &str = "#cloud-config\n# arm-fake-user-data";

fn secret_with(extra: &[(&str, &str)]) -> SecretData {
    let mut pairs = vec![
        ("clientID", CLIENT_ID),
        ("clientSecret", CLIENT_SECRET),
        ("tenantID", TENANT),
        ("subscriptionID", SUBSCRIPTION),
        ("userData", USER_DATA),
    ];
    pairs.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    pairs.extend_from_slice(extra);
    SecretData(pairs.into_iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
}

fn secret() -> SecretData {
    secret_with(&[])
}

/// Short pauses, so throttling and operation polling take milliseconds.
fn fast() -> AzureSettings {
    AzureSettings {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_retry_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        first_poll: Duration::from_millis(5),
        max_poll: Duration::from_millis(20),
        operation_timeout: Duration::from_secs(10),
    }
}

fn driver(arm: &ArmFake) -> AzureDriver {
    AzureDriver::with_endpoints(arm.url.clone(), arm.url.clone()).with_settings(fast())
}

/// A providerSpec of Gardener's shape for `cluster`, in the fake's resource group and subnet.
pub(super) fn spec(cluster: &str) -> Value {
    json!({
        "location": fake::LOCATION,
        "resourceGroup": RESOURCE_GROUP,
        "subnetInfo": {"vnetName": fake::VNET, "vnetResourceGroup": fake::VNET_GROUP, "subnetName": fake::SUBNET},
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D4s_v5"},
            "storageProfile": {
                "imageReference": {"urn": "sap:gardenlinux:greatest:1592.3.0"},
                "osDisk": {"caching": "ReadWrite", "diskSizeGB": 50, "createOption": "FromImage",
                    "managedDisk": {"storageAccountType": "Premium_LRS"}},
                "dataDisks": [{"name": "etcd", "lun": 0, "diskSizeGB": 20, "storageAccountType": "StandardSSD_LRS"}],
            },
            "osProfile": {"adminUsername": "core", "linuxConfiguration": {"disablePasswordAuthentication": true,
                "ssh": {"publicKeys": {"path": "/home/core/.ssh/authorized_keys", "keyData": "ssh-rsa AAAAfake"}}}},
            "networkProfile": {"acceleratedNetworking": true},
            "zone": 2,
        },
        "tags": {
            format!("kubernetes.io-cluster-{cluster}"): "1",
            "kubernetes.io-role-node": "1",
            "worker.gardener.cloud_pool": "pool-a",
        },
    })
}

fn class(name: &str, cluster: &str) -> ClassInfo {
    ClassInfo { name: name.into(), provider: PROVIDER.into(), provider_spec: spec(cluster), node_template: None }
}

fn request(machine: &str, class: &ClassInfo, provider_id: Option<&str>) -> MachineRequest {
    MachineRequest {
        machine: MachineInfo {
            name: machine.into(),
            namespace: "shoot--dev".into(),
            provider_id: provider_id.map(str::to_string),
            ..Default::default()
        },
        class: class.clone(),
        secret: secret(),
        last_known_state: None,
    }
}

fn provider_id(vm: &str) -> String {
    format!(
        "azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/{vm}"
    )
}

fn fixture() -> Fixture {
    let mut invalid_class = class("invalid", "dev");
    invalid_class.provider_spec["properties"]["hardwareProfile"]["vmSize"] = json!(4);
    let mut wrong_provider_class = class("aws", "dev");
    wrong_provider_class.provider = "AWS".into();
    Fixture {
        class: class("dev", "dev"),
        other_cluster_class: class("other", "other"),
        invalid_class,
        invalid_field: "properties.hardwareProfile.vmSize".into(),
        wrong_provider_class,
        secret: secret(),
        namespace: "shoot--dev".into(),
        machine_prefix: "conf".into(),
        absent_provider_id: Some(provider_id("conf-absent")),
    }
}

/// Every value a test must never see outside the fake: credentials, user data (plain and as custom data), the
/// bearer token.
fn secret_values() -> Vec<String> {
    vec![CLIENT_SECRET.into(), USER_DATA.into(), "arm-fake-user-data".into(), BASE64.encode(USER_DATA), TOKEN.into()]
}

fn assert_no_secret(err: &DriverError) {
    let shown = format!("{err} {err:?}");
    for value in secret_values() {
        assert!(!shown.contains(&value), "{value:?} shows in {shown}");
    }
}

fn assert_nothing_left(arm: &ArmFake) {
    for kind in [Kind::Vm, Kind::Nic, Kind::Disk] {
        assert_eq!(arm.names(kind), Vec::<String>::new(), "{kind:?} left behind");
    }
}

#[tokio::test]
async fn the_azure_driver_passes_the_conformance_suite_against_the_arm_fake() {
    let arm = ArmFake::start().await;
    conformance::run(&driver(&arm), &fixture()).await.unwrap();
    assert_nothing_left(&arm);
    // Every ARM call carried the token from the fake's token endpoint.
    let requests = arm.requests();
    assert!(requests.iter().any(|r| r.path == format!("/{TENANT}/oauth2/v2.0/token")));
    for r in requests.iter().filter(|r| r.path.starts_with("/subscriptions/")) {
        assert_eq!(r.authorization.as_deref(), Some(format!("Bearer {TOKEN}").as_str()), "{} {}", r.method, r.path);
    }
}

#[tokio::test]
async fn create_puts_the_nic_then_the_vm_with_the_class_and_the_user_data() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let created = driver.create_machine(&request("Worker-A", &class("dev", "dev"), None)).await.unwrap();
    assert_eq!(created.provider_id, provider_id("worker-a"));
    assert_eq!(created.node_name, "worker-a");
    assert!(created.addresses.iter().any(|a| a.type_ == "InternalIP" && a.address.starts_with("10.250.0.")));

    let puts: Vec<String> = arm.requests().into_iter().filter(|r| r.method == "PUT").map(|r| r.path).collect();
    assert_eq!(
        puts,
        [
            format!(
                "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/networkInterfaces/worker-a-nic"
            ),
            format!(
                "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/worker-a"
            ),
        ]
    );
    let nic = arm.requests_to("PUT", "networkInterfaces/worker-a-nic")[0].json();
    assert_eq!(nic["location"], "westeurope");
    assert_eq!(nic["tags"]["kubernetes.io-cluster-dev"], "1");
    assert_eq!(nic["properties"]["enableAcceleratedNetworking"], true);
    assert!(
        nic["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"]
            .as_str()
            .unwrap()
            .ends_with("/resourceGroups/shoot--dev-vnet/providers/Microsoft.Network/virtualNetworks/shoot--dev/subnets/shoot--dev-nodes")
    );

    let vm = arm.requests_to("PUT", "virtualMachines/worker-a")[0].json();
    let p = &vm["properties"];
    assert_eq!(p["hardwareProfile"]["vmSize"], "Standard_D4s_v5");
    assert_eq!(
        p["storageProfile"]["imageReference"],
        json!({"publisher": "sap", "offer": "gardenlinux", "sku": "greatest", "version": "1592.3.0"})
    );
    assert_eq!(vm["zones"], json!(["2"]));
    assert_eq!(vm["tags"]["worker.gardener.cloud_pool"], "pool-a");
    assert_eq!(vm["tags"]["kubernetes.io-role-node"], "1");
    assert_eq!(p["osProfile"]["customData"], BASE64.encode(USER_DATA));
    assert_eq!(p["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"], "ssh-rsa AAAAfake");
    assert_eq!(p["storageProfile"]["osDisk"]["name"], "worker-a-os-disk");
    assert_eq!(p["storageProfile"]["osDisk"]["diskSizeGB"], 50);
    assert_eq!(p["storageProfile"]["dataDisks"][0]["name"], "worker-a-etcd-0-data-disk");
    for pointer in [
        "/storageProfile/osDisk/deleteOption",
        "/storageProfile/dataDisks/0/deleteOption",
        "/networkProfile/networkInterfaces/0/properties/deleteOption",
    ] {
        assert_eq!(p.pointer(pointer), Some(&json!("Delete")), "{pointer}");
    }
    // The VM PUT was polled to its end, and a second create finds the VM instead of making another.
    assert_eq!(arm.get(Kind::Vm, "worker-a").unwrap()["properties"]["provisioningState"], "Succeeded");
    assert!(!arm.requests_to("GET", "/operations/").is_empty());
    let again = driver.create_machine(&request("worker-a", &class("dev", "dev"), None)).await.unwrap();
    assert_eq!(again.provider_id, created.provider_id);
    assert_eq!(arm.requests_to("PUT", "virtualMachines").len(), 1);
    // ARM never hands the custom data back.
    for r in arm.requests().iter().filter(|r| r.method == "GET") {
        assert!(!r.body.contains(&BASE64.encode(USER_DATA)));
    }
}

#[tokio::test]
async fn delete_removes_the_vm_then_its_nic_and_disks_even_without_delete_options() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let tags = json!({"kubernetes.io-cluster-dev": "1", "kubernetes.io-role-node": "1"});
    // A VM as an older driver made it: no deleteOption anywhere, so deleting the VM only detaches NIC and disks.
    let nic = arm.insert(Kind::Nic, "old-nic", tags.clone(), json!({"ipConfigurations": []}));
    let vm_id = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/old"
    );
    for disk in ["old-os-disk", "old-etcd-0-data-disk"] {
        arm.insert(Kind::Disk, disk, json!({}), json!({}));
        arm.attach(disk, &vm_id);
    }
    arm.insert(
        Kind::Vm,
        "old",
        tags,
        json!({
            "networkProfile": {"networkInterfaces": [{"id": nic["id"]}]},
            "storageProfile": {
                "osDisk": {"name": "old-os-disk", "managedDisk": {"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/disks/old-os-disk")}},
                "dataDisks": [{"lun": 0, "name": "old-etcd-0-data-disk", "managedDisk": {"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/disks/old-etcd-0-data-disk")}}],
            },
        }),
    );
    driver.delete_machine(&request("old", &class("dev", "dev"), Some(&provider_id("old")))).await.unwrap();
    assert_nothing_left(&arm);
    let deletes: Vec<String> = arm
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(deletes[0], "old", "the VM goes first: {deletes:?}");
    for leftover in ["old-nic", "old-os-disk", "old-etcd-0-data-disk"] {
        assert!(deletes.contains(&leftover.to_string()), "{leftover} not deleted: {deletes:?}");
    }
    // Again: nothing there, nothing to do, success.
    driver.delete_machine(&request("old", &class("dev", "dev"), Some(&provider_id("old")))).await.unwrap();
}

#[tokio::test]
async fn delete_of_a_half_made_machine_removes_its_nic_and_free_disks_but_nothing_foreign() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let ours = json!({"kubernetes.io-cluster-dev": "1", "kubernetes.io-role-node": "1"});
    let theirs = json!({"kubernetes.io-cluster-other": "1", "kubernetes.io-role-node": "1"});
    arm.insert(Kind::Nic, "half-nic", ours, json!({"ipConfigurations": []}));
    arm.insert(Kind::Disk, "half-os-disk", json!({}), json!({}));
    arm.insert(Kind::Disk, "half-etcd-0-data-disk", theirs, json!({}));
    driver.delete_machine(&request("half", &class("dev", "dev"), None)).await.unwrap();
    assert_eq!(arm.names(Kind::Nic), Vec::<String>::new());
    assert_eq!(arm.names(Kind::Disk), ["half-etcd-0-data-disk"], "another cluster's disk stays");
}

#[tokio::test]
async fn foreign_and_untagged_vms_are_never_listed_returned_or_deleted() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let dev = class("dev", "dev");
    arm.insert(Kind::Vm, "untagged", json!({}), json!({}));
    arm.insert(Kind::Vm, "no-role", json!({"kubernetes.io-cluster-dev": "1"}), json!({}));
    arm.insert(
        Kind::Vm,
        "theirs",
        json!({"kubernetes.io-cluster-other": "1", "kubernetes.io-role-node": "1"}),
        json!({}),
    );
    // A machine whose VM is gone but whose NIC is left: listed, so orphan collection removes it.
    arm.insert(
        Kind::Nic,
        "orphan-nic",
        json!({"kubernetes.io-cluster-dev": "1", "kubernetes.io-role-node": "1"}),
        json!({}),
    );
    let mine = driver.create_machine(&request("mine", &dev, None)).await.unwrap();

    let list = driver.list_machines(&ListMachinesRequest { class: dev.clone(), secret: secret() }).await.unwrap();
    let want: std::collections::BTreeMap<String, String> =
        [(mine.provider_id.clone(), "mine".to_string()), (provider_id("orphan"), "orphan".to_string())].into();
    assert_eq!(list, want);
    // Five VMs, NICs and disks: lists of two per page, so the driver followed nextLink.
    assert!(arm.requests().iter().any(|r| r.query.contains("skiptoken")), "no second page was fetched");

    for name in ["untagged", "no-role", "theirs"] {
        let r = request(name, &dev, Some(&provider_id(name)));
        assert_eq!(driver.get_machine_status(&r).await.unwrap_err().code, Code::NotFound, "{name}");
        assert_eq!(driver.delete_machine(&r).await.unwrap_err().code, Code::NotFound, "{name}");
        assert!(arm.get(Kind::Vm, name).is_some(), "{name} was deleted");
        let err = driver.create_machine(&r).await.unwrap_err();
        assert_eq!(err.code, Code::AlreadyExists, "{name}: {err}");
    }
    assert!(arm.requests_to("DELETE", "virtualMachines").is_empty());
}

#[tokio::test]
async fn throttling_is_retried_honouring_retry_after_then_unavailable() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let dev = class("dev", "dev");
    driver.create_machine(&request("t1", &dev, None)).await.unwrap();
    arm.clear_requests();
    arm.fail_with_retry_after("GET", "virtualMachines/t1", 1, 429, "TooManyRequests", "Too many requests.", Some(1));
    let started = Instant::now();
    let status = driver.get_machine_status(&request("t1", &dev, None)).await.unwrap();
    assert_eq!(status.provider_id, provider_id("t1"));
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was not honoured: {:?}", started.elapsed());
    let gets = arm.requests_to("GET", "virtualMachines/t1");
    assert_eq!(gets.iter().map(|r| r.status).collect::<Vec<_>>(), [429, 200]);

    // Throttled on every attempt: Unavailable (retried soon by the controller), after max_attempts tries.
    arm.clear_requests();
    arm.fail(
        "GET",
        "virtualMachines/t1",
        10,
        429,
        "SubscriptionRequestsThrottled",
        "Number of read requests exceeded.",
    );
    let err = driver.get_machine_status(&request("t1", &dev, None)).await.unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert!(err.message.contains("SubscriptionRequestsThrottled"), "{err}");
    assert_eq!(arm.requests_to("GET", "virtualMachines/t1").len(), 3);
    assert_no_secret(&err);
}

#[tokio::test]
async fn quota_and_allocation_failures_are_resource_exhausted_and_leave_nothing() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let dev = class("dev", "dev");
    arm.fail(
        "PUT",
        "virtualMachines/q1",
        1,
        409,
        "OperationNotAllowed",
        "Operation could not be completed as it results in exceeding approved standardDSv5Family Cores quota.",
    );
    let err = driver.create_machine(&request("q1", &dev, None)).await.unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    assert!(err.message.contains("OperationNotAllowed"), "{err}");
    assert_nothing_left(&arm);

    // Accepted, then the operation fails: the VM stays in state Failed on Azure; the driver removes all of it.
    arm.fail_operation("PUT", "virtualMachines/q2", "ZonalAllocationFailed", "Allocation failed in zone 2.");
    let err = driver.create_machine(&request("q2", &dev, None)).await.unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    assert!(err.message.contains("ZonalAllocationFailed"), "{err}");
    assert_nothing_left(&arm);

    arm.fail("PUT", "virtualMachines/s1", 1, 409, "SkuNotAvailable", "The requested VM size is not available.");
    assert_eq!(driver.create_machine(&request("s1", &dev, None)).await.unwrap_err().code, Code::ResourceExhausted);
    assert_nothing_left(&arm);
}

#[tokio::test]
async fn other_arm_errors_are_internal_with_the_arm_code() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let mut no_subnet = class("dev", "dev");
    no_subnet.provider_spec["subnetInfo"]["subnetName"] = json!("missing");
    let err = driver.create_machine(&request("e1", &no_subnet, None)).await.unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err}");
    assert!(
        err.message.contains("InvalidResourceReference") && err.message.contains("networkInterfaces/e1-nic"),
        "{err}"
    );
    assert_no_secret(&err);

    // A resource group that is gone holds no VM (status NotFound, delete done, as Gardener's driver has it), but
    // nothing can be created there.
    let mut no_group = class("dev", "dev");
    no_group.provider_spec["resourceGroup"] = json!("gone");
    let in_gone = request("e2", &no_group, None);
    assert_eq!(driver.get_machine_status(&in_gone).await.unwrap_err().code, Code::NotFound);
    driver.delete_machine(&in_gone).await.unwrap();
    let err = driver.create_machine(&in_gone).await.unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err}");
    assert!(err.message.contains("ResourceGroupNotFound"), "{err}");
}

#[tokio::test]
async fn a_rejected_client_secret_is_unauthenticated_and_never_shown() {
    let arm = ArmFake::start().await;
    let driver = driver(&arm);
    let mut r = request("a1", &class("dev", "dev"), None);
    r.secret = secret_with(&[("clientSecret", "Wrong~Secret.Value-987654321")]);
    let err = driver.get_machine_status(&r).await.unwrap_err();
    assert_eq!(err.code, Code::Unauthenticated, "{err}");
    assert!(err.message.contains("clientSecret"), "names the key to check: {err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("Wrong~Secret") && !shown.contains("AADSTS"), "{shown}");
    assert!(arm.requests().iter().all(|r| !r.path.starts_with("/subscriptions/")), "no ARM call without a token");
}

#[tokio::test]
async fn a_long_operation_is_deadline_exceeded_and_a_retry_picks_it_up() {
    let arm = ArmFake::start().await;
    let settings = AzureSettings { operation_timeout: Duration::from_millis(200), ..fast() };
    let driver = AzureDriver::with_endpoints(arm.url.clone(), arm.url.clone()).with_settings(settings);
    let dev = class("dev", "dev");
    arm.set_vm_polls(1_000_000);
    let err = driver.create_machine(&request("slow", &dev, None)).await.unwrap_err();
    assert_eq!(err.code, Code::DeadlineExceeded, "{err}");
    let polls = arm.requests_to("GET", "/operations/").len();
    assert!((2..200).contains(&polls), "bounded back-off, not a busy loop: {polls} polls");
    // The VM is still being created; the next create answers it instead of making a second one.
    let created = driver.create_machine(&request("slow", &dev, None)).await.unwrap();
    assert_eq!(created.provider_id, provider_id("slow"));
    assert_eq!(arm.requests_to("PUT", "virtualMachines/slow").len(), 1);
}

#[tokio::test]
async fn endpoints_come_from_the_class_secret() {
    let arm = ArmFake::start().await;
    // The driver's own endpoints lead nowhere; the secret's win.
    let driver = AzureDriver::with_endpoints("http://127.0.0.1:9/", "http://127.0.0.1:9/").with_settings(fast());
    let mut r = request("s1", &class("dev", "dev"), None);
    r.secret = secret_with(&[("endpoint", &arm.url), ("authorityHost", &arm.url)]);
    let created = driver.create_machine(&r).await.unwrap();
    assert_eq!(created.provider_id, provider_id("s1"));
    // Gardener's older key names work as well.
    let mut old = r.clone();
    old.secret = SecretData(
        [
            ("azureClientId", CLIENT_ID),
            ("azureClientSecret", CLIENT_SECRET),
            ("azureTenantId", TENANT),
            ("azureSubscriptionId", SUBSCRIPTION),
            ("userData", USER_DATA),
            ("endpoint", arm.url.as_str()),
            ("authorityHost", arm.url.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect(),
    );
    driver.delete_machine(&old).await.unwrap();
    assert_nothing_left(&arm);
}

/// Collects the formatted log lines of one test (the runtime is single-threaded, so the thread's default
/// subscriber sees the driver and the SDK).
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_debug_output_and_errors_never_show_secrets() {
    let arm = ArmFake::start().await;
    let captured = Captured::default();
    let writer = captured.clone();
    // As the binary logs with RUST_LOG=trace: the SDK targets are capped at info.
    let filter = mcm::providers::azure::quiet_sdk_logs(tracing_subscriber::EnvFilter::new("trace"), "trace");
    let subscriber =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(move || writer.clone()).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Callsites other tests' threads hit first may have cached "no interest"; count this subscriber in.
    tracing::callsite::rebuild_interest_cache();

    let driver = driver(&arm);
    let dev = class("dev", "dev");
    let r = request("logged", &dev, None);
    driver.create_machine(&r).await.unwrap();
    driver.get_machine_status(&r).await.unwrap();
    let list = ListMachinesRequest { class: dev.clone(), secret: secret() };
    driver.list_machines(&list).await.unwrap();
    let mut errors = Vec::new();
    arm.fail_operation("PUT", "virtualMachines/bad", "AllocationFailed", USER_DATA);
    errors.push(driver.create_machine(&request("bad", &dev, None)).await.unwrap_err());
    arm.fail("GET", "virtualMachines/logged", 1, 400, "InvalidParameter", CLIENT_SECRET);
    errors.push(driver.get_machine_status(&r).await.unwrap_err());
    let mut wrong = r.clone();
    wrong.secret = secret_with(&[("clientSecret", "Another~Wrong.Secret-000")]);
    errors.push(driver.get_machine_status(&wrong).await.unwrap_err());
    driver.delete_machine(&r).await.unwrap();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("mcm::providers::azure::driver"), "the capture works: {logs}");
    let shown = format!(
        "{logs}\n{driver:?}\n{r:?}\n{list:?}\n{errors:?}\n{}",
        errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
    );
    for value in secret_values().into_iter().chain(["Another~Wrong.Secret-000".to_string()]) {
        assert!(!shown.contains(&value), "{value:?} shows in:\n{shown}");
    }
}
