//! The AWS driver against moto's EC2 server (one `moto_server` per test, on a free port of 127.0.0.1) and, for
//! errors moto cannot produce, against a small fake EC2 endpoint.
//!
//! moto is found through `MOTO_SERVER` (set by `.ci/run`), then `PATH`, then `target/moto-venv` and `.ci/venv`;
//! without it these tests fail and say how to install it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
use mcm::providers::aws::{AwsDriver, AwsSettings, PROVIDER};
use mcm::providers::conformance::{self, Fixture};
use mcm::providers::{ClassInfo, Code, Driver, ListMachinesRequest, MachineInfo, MachineRequest, SecretData};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub(crate) const REGION: &str = "us-east-1";
const PROFILE: &str = "mcm-nodes";
pub(crate) const ACCESS_KEY_ID: &str = "AKIAMOTOTESTKEYID001";
pub(crate) const SECRET_ACCESS_KEY: &str = "moto-test-secret-access-key/0123456789";
pub(super) const USER_DATA: &str = "#cloud-config\n# moto-test-user-data";

/// Where `moto_server` is, or a panic saying how to get it.
fn moto_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("MOTO_SERVER").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(path.exists(), "MOTO_SERVER={} does not exist", path.display());
        return path;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("moto_server"));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venvs = ["target/moto-venv/bin/moto_server", ".ci/venv/bin/moto_server"].map(|p| root.join(p));
    on_path.chain(venvs).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "moto_server not found: the AWS driver tests need moto's EC2 server. Run .ci/run, or \
             `python3 -m venv target/moto-venv && target/moto-venv/bin/pip install 'moto[server]==5.2.1'`, or set \
             MOTO_SERVER=/path/to/moto_server"
        )
    })
}

/// A `moto_server` on a free port of 127.0.0.1, killed when dropped.
pub(crate) struct Moto {
    child: Child,
    pub(crate) url: String,
    addr: String,
    log: PathBuf,
}

impl Moto {
    async fn start() -> Moto {
        Moto::start_with(&[]).await
    }

    /// A server with extra environment (e.g. `INITIAL_NO_AUTH_ACTION_COUNT=0`, which makes moto check credentials).
    pub(super) async fn start_with(env: &[(&str, &str)]) -> Moto {
        let binary = moto_binary();
        for _ in 0..3 {
            let port = crate::support::free_port();
            let log = std::env::temp_dir().join(format!("mcm-moto-{port}-{}.log", uuid::Uuid::new_v4()));
            let child = Command::new(&binary)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
            let addr = format!("127.0.0.1:{port}");
            let mut moto = Moto { child, url: format!("http://{addr}"), addr, log };
            if moto.wait_ready().await {
                return moto;
            }
            // Lost the port to someone else, or moto died: try another port.
        }
        panic!("moto_server did not start (see the mcm-moto-*.log files in {})", std::env::temp_dir().display());
    }

    async fn wait_ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok((200, _)) = http(&self.addr, "GET", "/moto-api/data.json", &[], "").await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Clears every resource (between phases of one test).
    #[allow(dead_code)]
    async fn reset(&self) {
        let (status, body) = http(&self.addr, "POST", "/moto-api/reset", &[], "").await.unwrap();
        assert_eq!(status, 200, "{body}");
    }

    /// Creates an IAM instance profile (moto checks that RunInstances names an existing one).
    async fn create_instance_profile(&self, name: &str) {
        // moto picks the service from the credential scope of the Authorization header; it checks no signature.
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/20260101/{REGION}/iam/aws4_request, SignedHeaders=host, \
             Signature=0"
        );
        let body = format!("Action=CreateInstanceProfile&InstanceProfileName={name}&Version=2010-05-08");
        let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/x-www-form-urlencoded")];
        let (status, answer) = http(&self.addr, "POST", "/", &headers, &body).await.unwrap();
        assert_eq!(status, 200, "CreateInstanceProfile: {answer}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// One HTTP/1.1 request over a fresh connection: (status, body).
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn secret_with(extra: &[(&str, &str)]) -> SecretData {
    let mut data: Vec<(&str, &str)> = vec![
        ("providerAccessKeyId", ACCESS_KEY_ID),
        ("providerSecretAccessKey", SECRET_ACCESS_KEY),
        ("userData", USER_DATA),
    ];
    data.extend_from_slice(extra);
    SecretData(data.into_iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
}

fn secret() -> SecretData {
    secret_with(&[])
}

/// An EC2 client of the test itself (to make instances the driver did not make, and to look behind its back).
fn sdk(moto: &Moto) -> Client {
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(ACCESS_KEY_ID, SECRET_ACCESS_KEY, None, None, "test"))
        .endpoint_url(&moto.url)
        .build();
    Client::from_conf(config)
}

fn fast() -> AwsSettings {
    AwsSettings {
        visibility_timeout: Duration::from_secs(20),
        visibility_first_poll: Duration::from_millis(50),
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        ..Default::default()
    }
}

/// moto with an instance profile, and what a class needs from it: an AMI, a subnet and a security group.
pub(crate) struct World {
    pub(crate) moto: Moto,
    pub(crate) ec2: Client,
    ami: String,
    subnet: String,
    security_group: String,
}

impl World {
    pub(crate) async fn start() -> World {
        let moto = Moto::start().await;
        moto.create_instance_profile(PROFILE).await;
        let ec2 = sdk(&moto);
        let images = ec2.describe_images().owners("amazon").send().await.unwrap();
        let ami = images
            .images()
            .iter()
            .find(|i| i.root_device_name().is_some() && i.image_id().is_some())
            .and_then(|i| i.image_id())
            .expect("moto ships public AMIs")
            .to_string();
        let subnets = ec2.describe_subnets().send().await.unwrap();
        let subnet = subnets.subnets()[0].subnet_id().unwrap().to_string();
        let groups = ec2.describe_security_groups().group_names("default").send().await.unwrap();
        let security_group = groups.security_groups()[0].group_id().unwrap().to_string();
        World { moto, ec2, ami, subnet, security_group }
    }

    pub(super) fn driver(&self) -> AwsDriver {
        AwsDriver::with_endpoint(&self.moto.url).with_settings(fast())
    }

    pub(crate) fn spec(&self, cluster: &str) -> Value {
        json!({
            "ami": self.ami,
            "machineType": "t3.micro",
            "region": REGION,
            "iam": {"name": PROFILE},
            "keyName": "",
            "networkInterfaces": [{"subnetID": self.subnet, "securityGroupIDs": [self.security_group]}],
            "blockDevices": [{"ebs": {"volumeSize": 20, "volumeType": "gp3", "encrypted": true}}],
            "instanceMetadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2},
            "tags": {
                format!("kubernetes.io/cluster/{cluster}"): "1",
                "kubernetes.io/role/node": "1",
                "team": "mcm",
            },
        })
    }

    pub(super) fn class(&self, name: &str, cluster: &str) -> ClassInfo {
        ClassInfo {
            name: name.into(),
            provider: PROVIDER.into(),
            provider_spec: self.spec(cluster),
            node_template: None,
        }
    }

    fn request(&self, machine: &str, class: &ClassInfo, provider_id: Option<&str>) -> MachineRequest {
        MachineRequest {
            machine: MachineInfo {
                name: machine.into(),
                namespace: "default".into(),
                provider_id: provider_id.map(str::to_string),
                ..Default::default()
            },
            class: class.clone(),
            secret: secret(),
            last_known_state: None,
        }
    }

    fn fixture(&self) -> Fixture {
        let mut invalid = self.class("invalid", "conformance");
        invalid.provider_spec["blockDevices"][0]["ebs"]["volumeType"] = json!("gp9");
        let mut wrong_provider = self.class("wrong-provider", "conformance");
        wrong_provider.provider = "InMemory".into();
        Fixture {
            class: self.class("conformance", "conformance"),
            other_cluster_class: self.class("elsewhere", "elsewhere"),
            invalid_class: invalid,
            invalid_field: "blockDevices[0].ebs.volumeType".into(),
            wrong_provider_class: wrong_provider,
            secret: secret(),
            namespace: "default".into(),
            machine_prefix: "conformance".into(),
            absent_provider_id: Some(format!("aws:///{REGION}/i-0123456789abcdef0")),
        }
    }

    /// Launches an instance behind the driver's back, with these tags.
    pub(super) async fn launch(&self, tags: &[(&str, &str)]) -> String {
        let tags: Vec<Tag> = tags.iter().map(|(k, v)| Tag::builder().key(*k).value(*v).build()).collect();
        let mut run = self
            .ec2
            .run_instances()
            .image_id(&self.ami)
            .instance_type(InstanceType::T3Micro)
            .min_count(1)
            .max_count(1)
            .subnet_id(&self.subnet);
        if !tags.is_empty() {
            run = run.tag_specifications(
                TagSpecification::builder().resource_type(ResourceType::Instance).set_tags(Some(tags)).build(),
            );
        }
        let out = run.send().await.unwrap();
        out.instances()[0].instance_id().unwrap().to_string()
    }

    /// The state of an instance, as moto tells it.
    pub(super) async fn state(&self, id: &str) -> String {
        let out = self.ec2.describe_instances().instance_ids(id).send().await.unwrap();
        let instance = &out.reservations()[0].instances()[0];
        instance.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default()
    }

    /// Live instances whose Name tag is `name`.
    pub(super) async fn named(&self, name: &str) -> Vec<String> {
        let out = self
            .ec2
            .describe_instances()
            .filters(aws_sdk_ec2::types::Filter::builder().name("tag:Name").values(name).build())
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .build(),
            )
            .send()
            .await
            .unwrap();
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| i.instance_id())
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test]
async fn the_aws_driver_passes_the_conformance_suite_against_moto() {
    let world = World::start().await;
    let driver = world.driver();
    conformance::run(&driver, &world.fixture()).await.unwrap();
    let list = ListMachinesRequest { class: world.class("conformance", "conformance"), secret: secret() };
    assert!(driver.list_machines(&list).await.unwrap().is_empty(), "the suite terminates what it creates");
}

#[tokio::test]
async fn create_tags_the_instance_and_answers_its_private_dns_name() {
    let world = World::start().await;
    let driver = world.driver();
    let class = world.class("c", "dev");
    let created = driver.create_machine(&world.request("worker-1", &class, None)).await.unwrap();
    let id = created.provider_id.rsplit('/').next().unwrap();
    let out = world.ec2.describe_instances().instance_ids(id).send().await.unwrap();
    let instance = &out.reservations()[0].instances()[0];
    // The cloud-controller's form, with the instance's zone: CAPI core links Nodes to Machines by equality.
    let zone = instance.placement().and_then(|p| p.availability_zone()).expect("moto places the instance");
    assert!(zone.starts_with(REGION) && zone != REGION, "{zone}");
    assert_eq!(created.provider_id, format!("aws:///{zone}/{id}"));
    assert_eq!(created.node_name, instance.private_dns_name().unwrap());
    assert!(created.node_name.starts_with("ip-"), "{}", created.node_name);
    let mut tags: Vec<(String, String)> =
        instance.tags().iter().map(|t| (t.key().unwrap().to_string(), t.value().unwrap().to_string())).collect();
    tags.sort();
    assert_eq!(
        tags,
        [
            ("Name".to_string(), "worker-1".to_string()),
            ("kubernetes.io/cluster/dev".to_string(), "1".to_string()),
            ("kubernetes.io/role/node".to_string(), "1".to_string()),
            ("team".to_string(), "mcm".to_string()),
        ]
    );
    assert_eq!(instance.instance_type().map(|t| t.as_str()), Some("t3.micro"));
    assert_eq!(instance.iam_instance_profile().and_then(|p| p.arn()).map(|a| a.ends_with(PROFILE)), Some(true));
    assert!(created.addresses.iter().any(|a| a.type_ == "InternalIP"), "{:?}", created.addresses);
    // moto keeps the user data as sent: base64 of the secret's bytes.
    let attr = world
        .ec2
        .describe_instance_attribute()
        .instance_id(id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let sent = attr.user_data().and_then(|u| u.value()).unwrap_or_default();
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD.decode(sent).unwrap();
    assert_eq!(decoded, USER_DATA.as_bytes());
}

/// The zone form is what the driver reports everywhere; MCM's region form `aws:///<region>/<id>` of the same
/// instance still finds it (status, delete), so machines MCM's AWS provider made keep working.
#[tokio::test]
async fn the_zone_form_is_reported_and_the_region_form_still_names_the_instance() {
    let world = World::start().await;
    let driver = world.driver();
    let class = world.class("c", "dev");
    let created = driver.create_machine(&world.request("zoned", &class, None)).await.unwrap();
    let id = created.provider_id.rsplit('/').next().unwrap().to_string();
    let zone = created.provider_id.strip_prefix("aws:///").and_then(|r| r.split('/').next()).unwrap().to_string();
    assert!(zone.starts_with(REGION) && zone != REGION, "{}", created.provider_id);
    let zone_form = format!("aws:///{zone}/{id}");
    let region_form = format!("aws:///{REGION}/{id}");

    let listed = driver.list_machines(&ListMachinesRequest { class: class.clone(), secret: secret() }).await.unwrap();
    assert_eq!(listed.into_iter().collect::<Vec<_>>(), [(zone_form.clone(), "zoned".to_string())]);
    // By name (tags) and, under another name, by either form of the providerID: the zone form comes back.
    for (machine, provider_id) in [("zoned", None), ("renamed", Some(&region_form)), ("renamed", Some(&zone_form))] {
        let status =
            driver.get_machine_status(&world.request(machine, &class, provider_id.map(String::as_str))).await.unwrap();
        assert_eq!(status.provider_id, zone_form, "{machine} {provider_id:?}");
    }
    // Delete by the region form (a machine MCM's AWS provider made) terminates the instance.
    driver.delete_machine(&world.request("renamed", &class, Some(&region_form))).await.unwrap();
    assert!(["shutting-down", "terminated"].contains(&world.state(&id).await.as_str()));
    let err = driver.get_machine_status(&world.request("renamed", &class, Some(&region_form))).await.unwrap_err();
    assert_eq!(err.code, Code::NotFound, "{err}");
}

#[tokio::test]
async fn two_creates_make_one_instance() {
    let world = World::start().await;
    let driver = world.driver();
    let class = world.class("c", "dev");
    let request = world.request("twice", &class, None);
    let first = driver.create_machine(&request).await.unwrap();
    let second = driver.create_machine(&request).await.unwrap();
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(world.named("twice").await.len(), 1);
    // Once that instance is gone, a create of the same machine name makes a new one.
    driver.delete_machine(&world.request("twice", &class, Some(&first.provider_id))).await.unwrap();
    let third = driver.create_machine(&request).await.unwrap();
    assert_ne!(third.provider_id, first.provider_id);
    assert_eq!(world.named("twice").await.len(), 1);
}

#[tokio::test]
async fn foreign_and_untagged_instances_are_never_listed_or_deleted() {
    let world = World::start().await;
    let driver = world.driver();
    let class = world.class("c", "dev");
    let untagged = world.launch(&[]).await;
    let named_only = world.launch(&[("Name", "m1")]).await;
    let other_cluster =
        world.launch(&[("Name", "m1"), ("kubernetes.io/cluster/prod", "1"), ("kubernetes.io/role/node", "1")]).await;
    let no_role = world.launch(&[("Name", "m1"), ("kubernetes.io/cluster/dev", "1")]).await;
    let other_role =
        world.launch(&[("Name", "m1"), ("kubernetes.io/cluster/dev", "1"), ("kubernetes.io/role/bastion", "1")]).await;
    let foreign = [&untagged, &named_only, &other_cluster, &no_role, &other_role];

    let list = ListMachinesRequest { class: class.clone(), secret: secret() };
    assert_eq!(driver.list_machines(&list).await.unwrap(), Default::default());
    let mine = driver.create_machine(&world.request("m1", &class, None)).await.unwrap();
    let listed = driver.list_machines(&list).await.unwrap();
    assert_eq!(listed.into_iter().collect::<Vec<_>>(), [(mine.provider_id.clone(), "m1".to_string())]);

    // Status by name sees only ours; by a providerID of a foreign instance, nothing.
    let status = driver.get_machine_status(&world.request("m1", &class, None)).await.unwrap();
    assert_eq!(status.provider_id, mine.provider_id);
    for id in foreign {
        let by_id = world.request("m1-elsewhere", &class, Some(&format!("aws:///{REGION}/{id}")));
        let err = driver.get_machine_status(&by_id).await.unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{id}: {err}");
        // Delete by that providerID leaves it alone (NotFound: the controller moves on).
        let err = driver.delete_machine(&by_id).await.unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{id}: {err}");
    }
    // Delete by tags takes ours only.
    driver.delete_machine(&world.request("m1", &class, None)).await.unwrap();
    for id in foreign {
        assert_eq!(world.state(id).await, "running", "{id}");
    }
    let mine_id = mine.provider_id.rsplit('/').next().unwrap();
    assert!(["shutting-down", "terminated"].contains(&world.state(mine_id).await.as_str()));
    assert!(driver.list_machines(&list).await.unwrap().is_empty());
}

/// An orphan instance tagged for the cluster and role but without a `Name` tag (listed with an empty name, so the
/// safety controller's request names no machine) is terminated by its providerID.
#[tokio::test]
async fn an_instance_without_a_name_tag_is_deleted_by_its_provider_id() {
    let world = World::start().await;
    let driver = world.driver();
    let class = world.class("c", "dev");
    let nameless = world.launch(&[("kubernetes.io/cluster/dev", "1"), ("kubernetes.io/role/node", "1")]).await;
    let listed = driver.list_machines(&ListMachinesRequest { class: class.clone(), secret: secret() }).await.unwrap();
    let (provider_id, name) = listed.iter().find(|(id, _)| id.ends_with(&nameless)).expect("listed");
    assert_eq!(name, "", "no Name tag: listed without a machine name");

    driver.delete_machine(&world.request("", &class, Some(provider_id))).await.unwrap();
    assert_eq!(world.state(&nameless).await, "terminated");
    // Again: already gone, still fine.
    driver.delete_machine(&world.request("", &class, Some(provider_id))).await.unwrap();
}

#[tokio::test]
async fn delete_without_a_provider_id_terminates_every_instance_tagged_for_the_machine() {
    let world = World::start().await;
    let driver = world.driver();
    let class = world.class("c", "dev");
    let created = driver.create_machine(&world.request("dup", &class, None)).await.unwrap();
    // A leaked second VM of the same machine (e.g. from a create whose answer was lost).
    let leaked =
        world.launch(&[("Name", "dup"), ("kubernetes.io/cluster/dev", "1"), ("kubernetes.io/role/node", "1")]).await;
    assert_eq!(world.named("dup").await.len(), 2);

    let err = driver.get_machine_status(&world.request("dup", &class, None)).await.unwrap_err();
    assert_eq!(err.code, Code::OutOfRange, "{err}");
    assert!(
        err.message.contains(&leaked) && err.message.contains(created.provider_id.rsplit('/').next().unwrap()),
        "{err}"
    );
    // Create does not add a third, nor pick one silently.
    let err = driver.create_machine(&world.request("dup", &class, None)).await.unwrap_err();
    assert_eq!(err.code, Code::OutOfRange, "{err}");

    driver.delete_machine(&world.request("dup", &class, None)).await.unwrap();
    assert!(world.named("dup").await.is_empty());
    driver.delete_machine(&world.request("dup", &class, None)).await.unwrap();
    let err = driver.get_machine_status(&world.request("dup", &class, None)).await.unwrap_err();
    assert_eq!(err.code, Code::NotFound, "{err}");
}

#[tokio::test]
async fn initialize_turns_the_source_destination_check_off() {
    let world = World::start().await;
    let driver = world.driver();
    let mut class = world.class("nat", "dev");
    class.provider_spec["srcAndDstChecksEnabled"] = json!(false);
    let request = world.request("nat-1", &class, None);
    let created = driver.create_machine(&request).await.unwrap();
    let err = driver.get_machine_status(&request).await.unwrap_err();
    assert_eq!(err.code, Code::Uninitialized, "{err}");
    let initialized = driver.initialize_machine(&request).await.unwrap();
    assert_eq!(initialized.provider_id, created.provider_id);
    let status = driver.get_machine_status(&request).await.unwrap();
    assert_eq!(status.provider_id, created.provider_id);
    // Nothing to do a second time, and nothing at all for a class that asks for nothing.
    driver.initialize_machine(&request).await.unwrap();
    let plain = world.request("plain", &world.class("c", "dev"), None);
    assert_eq!(driver.initialize_machine(&plain).await.unwrap_err().code, Code::Unimplemented);
}

#[tokio::test]
async fn the_secret_endpoint_key_points_the_driver_at_moto() {
    let world = World::start().await;
    // No endpoint in the driver: only the class secret's `endpoint` leads to moto.
    let driver = AwsDriver::new().with_settings(fast());
    let class = world.class("c", "dev");
    let list = ListMachinesRequest { class: class.clone(), secret: secret_with(&[("endpoint", &world.moto.url)]) };
    assert!(driver.list_machines(&list).await.unwrap().is_empty());
    let mut request = world.request("via-secret", &class, None);
    request.secret = list.secret.clone();
    let created = driver.create_machine(&request).await.unwrap();
    assert_eq!(driver.list_machines(&list).await.unwrap().len(), 1, "{created:?}");
}

#[tokio::test]
async fn moto_errors_map_to_codes_without_secrets() {
    let world = World::start().await;
    let driver = world.driver();
    let mut no_ami = world.class("c", "dev");
    no_ami.provider_spec["ami"] = json!("ami-00000000000000000");
    let mut no_subnet = world.class("c", "dev");
    no_subnet.provider_spec["networkInterfaces"][0]["subnetID"] = json!("subnet-00000000");
    let mut no_profile = world.class("c", "dev");
    no_profile.provider_spec["iam"] = json!({"name": "no-such-profile"});
    let cases = [
        ("unknown AMI", no_ami, Code::NotFound, "AMI ami-00000000000000000 not found"),
        ("unknown subnet", no_subnet, Code::Internal, "EC2 RunInstances: InvalidSubnetID.NotFound"),
        ("unknown instance profile", no_profile, Code::Internal, "EC2 RunInstances: "),
    ];
    for (name, class, code, want) in cases {
        let err = driver.create_machine(&world.request("m", &class, None)).await.unwrap_err();
        assert_eq!(err.code, code, "{name}: {err}");
        assert!(err.message.starts_with(want), "{name}: {err}");
        assert_no_secret(&err);
    }
    assert!(world.named("m").await.is_empty());
}

#[tokio::test]
async fn rejected_credentials_are_unauthenticated_and_never_shown() {
    // With INITIAL_NO_AUTH_ACTION_COUNT=0 moto checks every request's access key against its IAM users.
    let moto = Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]).await;
    let driver = AwsDriver::with_endpoint(&moto.url).with_settings(fast());
    let class = ClassInfo {
        name: "c".into(),
        provider: PROVIDER.into(),
        provider_spec: json!({
            "ami": "ami-1", "machineType": "t3.micro", "region": REGION, "iam": {"name": PROFILE},
            "networkInterfaces": [{"subnetID": "subnet-1", "securityGroupIDs": ["sg-1"]}],
            "tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"},
        }),
        node_template: None,
    };
    let err = driver.list_machines(&ListMachinesRequest { class, secret: secret() }).await.unwrap_err();
    // moto answers AuthFailure, as EC2 does for an unknown access key.
    assert_eq!(err.code, Code::Unauthenticated, "{err}");
    assert!(err.message.contains("(AuthFailure)"), "{err}");
    assert!(err.message.starts_with("EC2 DescribeInstances: "), "{err}");
    assert_no_secret(&err);
}

fn assert_no_secret(err: &mcm::providers::DriverError) {
    let shown = format!("{err} {err:?}");
    for value in [ACCESS_KEY_ID, SECRET_ACCESS_KEY, "moto-test-user-data"] {
        assert!(!shown.contains(value), "{shown}");
    }
}

/// A fake EC2 endpoint answering each action with a canned XML body (or an error code), keeping the request bodies.
pub(super) struct FakeEc2 {
    pub(super) url: String,
    bodies: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEc2 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeEc2 {
    /// `answer(action)` gives (HTTP status, body) for each request.
    pub(super) async fn start(answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static) -> FakeEc2 {
        FakeEc2::start_with_body(move |action, _| answer(action)).await
    }

    /// `answer(action, request body)` gives (HTTP status, body) for each request.
    async fn start_with_body(answer: impl Fn(&str, &str) -> (u16, String) + Send + Sync + 'static) -> FakeEc2 {
        let answer = Arc::new(answer);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = bodies.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                let answer = answer.clone();
                tokio::spawn(async move {
                    while let Some(body) = read_request(&mut stream).await {
                        seen.lock().unwrap().push(body.clone());
                        let action =
                            body.split('&').find_map(|kv| kv.strip_prefix("Action=")).unwrap_or_default().to_string();
                        let (status, xml) = answer(&action, &body);
                        let reply = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{xml}",
                            xml.len()
                        );
                        if stream.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeEc2 { url, bodies, task }
    }

    /// The request bodies of `action` so far.
    fn requests(&self, action: &str) -> Vec<String> {
        let marker = format!("Action={action}&");
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.contains(&marker) || b.ends_with(&marker[..marker.len() - 1]))
            .cloned()
            .collect()
    }
}

/// Reads one HTTP request (headers and a Content-Length body) from a kept-alive connection.
async fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

fn ec2_error(status: u16, code: &str) -> (u16, String) {
    (
        status,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{code} \
             (fake)</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
        ),
    )
}

fn fake_class() -> ClassInfo {
    ClassInfo {
        name: "c".into(),
        provider: PROVIDER.into(),
        provider_spec: json!({
            "ami": "ami-1", "machineType": "p5.48xlarge", "region": REGION, "iam": {"name": PROFILE},
            "networkInterfaces": [{"subnetID": "subnet-1", "securityGroupIDs": ["sg-1"]}],
            "tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"},
        }),
        node_template: None,
    }
}

fn fake_request() -> MachineRequest {
    MachineRequest {
        machine: MachineInfo { name: "m1".into(), namespace: "default".into(), ..Default::default() },
        class: fake_class(),
        secret: secret(),
        last_known_state: None,
    }
}

#[tokio::test]
async fn throttling_is_retried_with_back_off_then_unavailable() {
    let fake = FakeEc2::start(|_| ec2_error(503, "RequestLimitExceeded")).await;
    let driver = AwsDriver::with_endpoint(&fake.url).with_settings(fast());
    let err = driver.get_machine_status(&fake_request()).await.unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert!(err.message.contains("RequestLimitExceeded"), "{err}");
    assert_eq!(fake.requests("DescribeInstances").len(), fast().max_attempts as usize, "the SDK retried");
    assert_no_secret(&err);
}

#[tokio::test]
async fn capacity_and_quota_errors_are_resource_exhausted() {
    for code in ["InsufficientInstanceCapacity", "VcpuLimitExceeded", "Unsupported"] {
        let fake = FakeEc2::start(move |action| match action {
            "DescribeInstances" => (200, NO_INSTANCES.to_string()),
            "DescribeImages" => (200, ONE_IMAGE.to_string()),
            _ => ec2_error(if code.starts_with("Insufficient") { 500 } else { 400 }, code),
        })
        .await;
        let driver = AwsDriver::with_endpoint(&fake.url).with_settings(fast());
        let err = driver.create_machine(&fake_request()).await.unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted, "{code}: {err}");
        assert!(err.message.starts_with(&format!("EC2 RunInstances: {code}")), "{err}");
        assert_no_secret(&err);
    }
}

#[tokio::test]
async fn an_auth_failure_from_ec2_names_the_secret_keys_not_their_values() {
    let fake = FakeEc2::start(|_| ec2_error(401, "AuthFailure")).await;
    let driver = AwsDriver::with_endpoint(&fake.url).with_settings(fast());
    let list = ListMachinesRequest { class: fake_class(), secret: secret() };
    let err = driver.list_machines(&list).await.unwrap_err();
    assert_eq!(err.code, Code::Unauthenticated, "{err}");
    assert!(err.message.contains("providerAccessKeyId/providerSecretAccessKey"), "{err}");
    assert_no_secret(&err);
}

/// Collects formatted log lines of one test (the test runtime is single-threaded, so the thread's default
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
    // aws_smithy_runtime would print the access key ID at debug level: the binary's filter caps it.
    let unfiltered =
        mcm::providers::aws::quiet_sdk_logs(tracing_subscriber::EnvFilter::new("debug"), "aws_smithy_runtime=debug");
    assert!(
        unfiltered.to_string().contains("aws_config=info")
            && !unfiltered.to_string().contains("aws_smithy_runtime=info")
    );
    let world = World::start().await;
    let captured = Captured::default();
    let writer = captured.clone();
    // As the binary logs with RUST_LOG=debug.
    let filter = mcm::providers::aws::quiet_sdk_logs(tracing_subscriber::EnvFilter::new("debug"), "debug");
    let subscriber =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(move || writer.clone()).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Other tests of this binary run on other threads with other (or no) subscribers; a callsite one of them hit
    // first may have cached "never" for ours. Rebuilding the cache with ours registered counts every callsite in.
    tracing::callsite::rebuild_interest_cache();

    let driver = world.driver();
    let class = world.class("c", "dev");
    let request = world.request("logged", &class, None);
    let created = driver.create_machine(&request).await.unwrap();
    driver.create_machine(&request).await.unwrap();
    driver.get_machine_status(&request).await.unwrap();
    let list = ListMachinesRequest { class: class.clone(), secret: secret() };
    driver.list_machines(&list).await.unwrap();
    let mut errors = Vec::new();
    let mut no_ami = class.clone();
    no_ami.provider_spec["ami"] = json!("ami-00000000000000000");
    errors.push(driver.create_machine(&world.request("bad", &no_ami, None)).await.unwrap_err());
    let mut no_subnet = class.clone();
    no_subnet.provider_spec["networkInterfaces"][0]["subnetID"] = json!("subnet-00000000");
    errors.push(driver.create_machine(&world.request("bad", &no_subnet, None)).await.unwrap_err());
    errors.push(driver.initialize_machine(&request).await.unwrap_err());
    driver.delete_machine(&world.request("logged", &class, Some(&created.provider_id))).await.unwrap();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    // The SDK's spans prove the capture works. Our own "create: instance launched" line is usually there too, but
    // not always under a loaded test binary: tracing's global callsite cache can still race with another test's
    // subscriber registering at the same moment, which the rebuild above narrows but cannot close.
    assert!(logs.contains("EC2.RunInstances"), "the capture works: {logs}");
    let shown = format!(
        "{logs}\n{driver:?}\n{request:?}\n{list:?}\n{errors:?}\n{}",
        errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
    );
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(USER_DATA);
    for value in [ACCESS_KEY_ID, SECRET_ACCESS_KEY, "moto-test-user-data", encoded.as_str()] {
        assert!(!shown.contains(value), "{value:?} shows in:\n{shown}");
    }
}

const NO_INSTANCES: &str =
    "<DescribeInstancesResponse><requestId>r</requestId><reservationSet/></DescribeInstancesResponse>";
const ONE_IMAGE: &str = "<DescribeImagesResponse><requestId>r</requestId><imagesSet><item><imageId>ami-1</imageId>\
    <rootDeviceName>/dev/xvda</rootDeviceName></item></imagesSet></DescribeImagesResponse>";

/// An instance item of EC2's XML answers.
fn instance_xml(id: &str, state: &str) -> String {
    format!(
        "<item><instanceId>{id}</instanceId><instanceState><code>0</code><name>{state}</name></instanceState>\
         <placement><availabilityZone>{REGION}b</availabilityZone></placement>\
         <privateDnsName>ip-10-0-0-9.ec2.internal</privateDnsName><privateIpAddress>10.0.0.9</privateIpAddress></item>"
    )
}

fn run_answer(id: &str, state: &str) -> (u16, String) {
    let item = instance_xml(id, state);
    (
        200,
        format!(
            "<RunInstancesResponse><requestId>r</requestId><reservationId>r-1</reservationId><ownerId>1</ownerId>\
             <instancesSet>{item}</instancesSet></RunInstancesResponse>"
        ),
    )
}

fn describe_answer(id: &str, state: &str) -> (u16, String) {
    let item = instance_xml(id, state);
    (
        200,
        format!(
            "<DescribeInstancesResponse><requestId>r</requestId><reservationSet><item><reservationId>r-1</reservationId>\
             <instancesSet>{item}</instancesSet></item></reservationSet></DescribeInstancesResponse>"
        ),
    )
}

/// EC2 of a machine name used before: the stable ClientToken belongs to a terminated instance (`spent`) or EC2
/// refuses it (`mismatch`); any other token launches `i-new`.
fn token_cloud(stable: String, mismatch: bool) -> impl Fn(&str, &str) -> (u16, String) + Send + Sync + 'static {
    move |action, body| match action {
        "DescribeInstances" if body.contains("InstanceId.1=i-new") => describe_answer("i-new", "running"),
        "DescribeInstances" => (200, NO_INSTANCES.to_string()),
        "DescribeImages" => (200, ONE_IMAGE.to_string()),
        "RunInstances" if body.contains(&format!("ClientToken={stable}")) && mismatch => {
            ec2_error(400, "IdempotentParameterMismatch")
        }
        "RunInstances" if body.contains(&format!("ClientToken={stable}")) => run_answer("i-old", "terminated"),
        "RunInstances" => run_answer("i-new", "pending"),
        _ => ec2_error(400, "InvalidAction"),
    }
}

#[tokio::test]
async fn a_spent_client_token_is_replaced_once() {
    let stable = mcm::providers::aws::request::client_token("default", "m1", 0);
    for mismatch in [false, true] {
        let fake = FakeEc2::start_with_body(token_cloud(stable.clone(), mismatch)).await;
        let driver = AwsDriver::with_endpoint(&fake.url).with_settings(fast());
        let created = driver.create_machine(&fake_request()).await.unwrap();
        assert_eq!(created.provider_id, format!("aws:///{REGION}b/i-new"), "mismatch={mismatch}");
        assert_eq!(created.node_name, "ip-10-0-0-9.ec2.internal");
        let runs = fake.requests("RunInstances");
        assert_eq!(runs.len(), 2, "mismatch={mismatch}");
        assert!(runs[0].contains(&format!("ClientToken={stable}")), "{}", runs[0]);
        assert!(runs[1].contains("ClientToken=mcm-") && !runs[1].contains(&stable), "{}", runs[1]);
    }
}

#[tokio::test]
async fn run_instances_carries_the_token_tags_user_data_and_the_spec() {
    let fake = FakeEc2::start_with_body(|action, body| match action {
        "DescribeInstances" if body.contains("InstanceId.1=i-new") => describe_answer("i-new", "running"),
        "DescribeInstances" => (200, NO_INSTANCES.to_string()),
        "DescribeImages" => (200, ONE_IMAGE.to_string()),
        "RunInstances" => run_answer("i-new", "pending"),
        _ => ec2_error(400, "InvalidAction"),
    })
    .await;
    let driver = AwsDriver::with_endpoint(&fake.url).with_settings(fast());
    let mut request = fake_request();
    request.class.provider_spec["blockDevices"] =
        json!([{"ebs": {"volumeSize": 30, "volumeType": "gp3", "kmsKeyID": "key-1", "encrypted": true}}]);
    request.class.provider_spec["spotPrice"] = json!("0.5");
    driver.create_machine(&request).await.unwrap();
    let run = fake.requests("RunInstances").remove(0);
    let form: std::collections::BTreeMap<String, String> = serde_urlencoded::from_str(&run).unwrap();
    use base64::Engine;
    let want = [
        ("ClientToken", mcm::providers::aws::request::client_token("default", "m1", 0)),
        ("ImageId", "ami-1".to_string()),
        ("InstanceType", "p5.48xlarge".to_string()),
        ("UserData", base64::engine::general_purpose::STANDARD.encode(USER_DATA)),
        ("IamInstanceProfile.Name", PROFILE.to_string()),
        ("NetworkInterface.1.SubnetId", "subnet-1".to_string()),
        ("NetworkInterface.1.SecurityGroupId.1", "sg-1".to_string()),
        ("NetworkInterface.1.DeviceIndex", "0".to_string()),
        ("NetworkInterface.1.DeleteOnTermination", "true".to_string()),
        ("BlockDeviceMapping.1.DeviceName", "/dev/xvda".to_string()),
        ("BlockDeviceMapping.1.Ebs.VolumeSize", "30".to_string()),
        ("BlockDeviceMapping.1.Ebs.KmsKeyId", "key-1".to_string()),
        ("InstanceMarketOptions.MarketType", "spot".to_string()),
        ("InstanceMarketOptions.SpotOptions.MaxPrice", "0.5".to_string()),
        ("TagSpecification.1.ResourceType", "instance".to_string()),
        ("TagSpecification.1.Tag.1.Key", "Name".to_string()),
        ("TagSpecification.1.Tag.1.Value", "m1".to_string()),
        ("TagSpecification.2.ResourceType", "volume".to_string()),
        ("TagSpecification.3.ResourceType", "network-interface".to_string()),
        ("MinCount", "1".to_string()),
        ("MaxCount", "1".to_string()),
    ];
    for (key, value) in want {
        assert_eq!(form.get(key), Some(&value), "{key} in {form:#?}");
    }
    // Create waited for DescribeInstances to show the new instance.
    assert!(fake.requests("DescribeInstances").iter().any(|b| b.contains("InstanceId.1=i-new")));
}
