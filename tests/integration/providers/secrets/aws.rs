//! The full run on moto: the class secret holds both key forms (`providerAccessKeyId`/`providerSecretAccessKey`,
//! used, and `accessKeyID`/`secretAccessKey`, present); a second class's keys (the `accessKeyID` form) go to a
//! moto that checks credentials and answers `AuthFailure`; a third secret has a secret access key and no key ID.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::Filter;

use super::super::aws::{ACCESS_KEY_ID, FakeEc2, Moto, SECRET_ACCESS_KEY, USER_DATA, World};
use super::{Cloud, Secrets, assert_never_shown, class_with_secret, full_run};
use crate::run::RunEnv;

const CLUSTER: &str = "shoot--aws-secrets";
const UNUSED_KEY_ID: &str = "AKIAUNUSEDFORMKEY0042";
const UNUSED_SECRET_KEY: &str = "unused-form-secret-access-key/5d1e+c0ffee";
const REJECTED_KEY_ID: &str = "AKIAREJECTEDKEYID0077";
const REJECTED_SECRET_KEY: &str = "rejected-secret-access-key/9a8b+7c6d==";
const REJECTED_USER_DATA: &str = "#cloud-config\n# aws-rejected-user-data-41f0";
const INVALID_SECRET_KEY: &str = "invalid-secret-access-key/without+an-id";

struct Aws(World);

impl Cloud for Aws {
    const TARGET: &'static str = "mcm::providers::aws";

    async fn instances(&self) -> BTreeSet<String> {
        let out = self
            .0
            .ec2
            .describe_instances()
            .filters(Filter::builder().name("tag-key").values(format!("kubernetes.io/cluster/{CLUSTER}")).build())
            .filters(Filter::builder().name("instance-state-name").values("pending").values("running").build())
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

    async fn plant_orphan(&self) -> String {
        let cluster = format!("kubernetes.io/cluster/{CLUSTER}");
        self.0.launch(&[(&cluster, "1"), ("kubernetes.io/role/node", "1"), ("Name", "forgotten")]).await
    }

    async fn orphan_gone(&self, orphan: &str) -> bool {
        self.0.state(orphan).await == "terminated"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_on_aws_never_shows_a_secret() {
    let world = World::start().await;
    let env = RunEnv::start(0.2).await;
    let mut secrets = Secrets::default();

    class_with_secret(
        &env,
        "aws",
        "AWS",
        world.spec(CLUSTER),
        &[
            ("providerAccessKeyId", ACCESS_KEY_ID),
            ("providerSecretAccessKey", SECRET_ACCESS_KEY),
            ("accessKeyID", UNUSED_KEY_ID),
            ("secretAccessKey", UNUSED_SECRET_KEY),
            ("userData", USER_DATA),
            ("endpoint", &world.moto.url),
        ],
    )
    .await;
    secrets.add("providerAccessKeyId", ACCESS_KEY_ID);
    secrets.add("providerSecretAccessKey", SECRET_ACCESS_KEY);
    secrets.add("accessKeyID", UNUSED_KEY_ID);
    secrets.add("secretAccessKey", UNUSED_SECRET_KEY);
    secrets.add_with_lines("userData", USER_DATA);

    // Keys a moto that checks credentials does not know: EC2's AuthFailure.
    let checking = Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]).await;
    class_with_secret(
        &env,
        "aws-rejected",
        "AWS",
        world.spec("shoot--aws-rejected"),
        &[
            ("accessKeyID", REJECTED_KEY_ID),
            ("secretAccessKey", REJECTED_SECRET_KEY),
            ("userData", REJECTED_USER_DATA),
            ("endpoint", &checking.url),
        ],
    )
    .await;
    secrets.add("rejected accessKeyID", REJECTED_KEY_ID);
    secrets.add("rejected secretAccessKey", REJECTED_SECRET_KEY);
    secrets.add_with_lines("rejected userData", REJECTED_USER_DATA);

    // An invalid secret: a secret access key without its key ID.
    class_with_secret(
        &env,
        "aws-invalid",
        "AWS",
        world.spec("shoot--aws-invalid"),
        &[("providerSecretAccessKey", INVALID_SECRET_KEY), ("userData", USER_DATA), ("endpoint", &world.moto.url)],
    )
    .await;
    secrets.add("invalid providerSecretAccessKey", INVALID_SECRET_KEY);

    // An EC2 that refuses every call with the class `aws`'s keys and user data echoed in its message.
    let echoing = FakeEc2::start(|_| {
        let message =
            format!("The access key {ACCESS_KEY_ID} (secret {SECRET_ACCESS_KEY}) may not launch user data {USER_DATA}");
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>UnauthorizedOperation</Code>\
             <Message>{message}</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
        );
        (403, xml)
    })
    .await;
    class_with_secret(
        &env,
        "aws-echoed",
        "AWS",
        world.spec("shoot--aws-echoed"),
        &[
            ("providerAccessKeyId", ACCESS_KEY_ID),
            ("providerSecretAccessKey", SECRET_ACCESS_KEY),
            ("userData", USER_DATA),
            ("endpoint", &echoing.url),
        ],
    )
    .await;

    let cloud = Aws(world);
    let failing = [("rejected-aws", "aws-rejected"), ("invalid-aws", "aws-invalid"), ("echoed-aws", "aws-echoed")];
    let captured = full_run(&env, &cloud, "aws", &failing).await;
    // Checked first: a failure message below may show what the run showed.
    assert_never_shown(&secrets, &captured);
    let rejected = captured.failures.iter().find(|(m, _)| m == "rejected-aws").map(|(_, d)| d.as_str());
    assert!(rejected.is_some_and(|d| d.contains("AuthFailure")), "moto refused the keys: {rejected:?}");
    drop((checking, echoing));
    env.env.shutdown().await;
}
