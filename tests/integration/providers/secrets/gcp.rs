//! The full run on the GCP Compute fake: a real (freshly generated) service-account key signs the driver's token
//! requests; a second key's requests are answered 401 with the key echoed in the error; a third secret's key is
//! not valid JSON.

use std::collections::BTreeSet;

use super::super::gcp::{PROJECT, USER_DATA, ZONE, service_account_key, spec};
use super::super::gcp_fake::{ComputeFake, Fault};
use super::{Cloud, Secrets, assert_never_shown, class_with_secret, full_run};
use crate::run::RunEnv;

const CLUSTER: &str = "shoot--gcp-secrets";
const BAD_USER_DATA: &str = "#cloud-config\n# gcp-rejected-key-user-data-5b8e";
const INVALID_KEY_MATERIAL: &str = "MIIEinvalidGCPkeyMATERIALnotJSON0c7d";

struct Gcp(ComputeFake);

impl Cloud for Gcp {
    const TARGET: &'static str = "mcm::providers::gcp";

    async fn instances(&self) -> BTreeSet<String> {
        let tag = format!("kubernetes-io-cluster-{CLUSTER}");
        self.0
            .instances(PROJECT, ZONE)
            .into_iter()
            .filter(|(_, i)| i["tags"]["items"].as_array().is_some_and(|t| t.iter().any(|t| t == tag.as_str())))
            .map(|(name, _)| name)
            .collect()
    }

    async fn plant_orphan(&self) -> String {
        let tags = [format!("kubernetes-io-cluster-{CLUSTER}"), "kubernetes-io-role-node".to_string()];
        self.0.seed_instance(PROJECT, ZONE, "forgotten", &tags.iter().map(String::as_str).collect::<Vec<_>>());
        "forgotten".to_string()
    }

    async fn orphan_gone(&self, orphan: &str) -> bool {
        !self.0.instances(PROJECT, ZONE).contains_key(orphan)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_on_gcp_never_shows_a_secret() {
    let fake = ComputeFake::start(1).await;
    let env = RunEnv::start(0.2).await;
    let mut secrets = Secrets::default();

    let (key, pem) = service_account_key(&fake);
    class_with_secret(
        &env,
        "gcp",
        "GCP",
        spec(CLUSTER),
        &[("serviceAccountJSON", &key), ("userData", USER_DATA), ("endpoint", &fake.url)],
    )
    .await;
    secrets.add("serviceAccountJSON", &key);
    secrets.add_with_lines("serviceAccountJSON private_key", &pem);
    secrets.add_with_lines("userData", USER_DATA);

    // A key the cloud rejects, its error text echoing the key and the user data back.
    let (bad_key, bad_pem) = service_account_key(&fake);
    class_with_secret(
        &env,
        "gcp-rejected",
        "GCP",
        spec("shoot--gcp-rejected"),
        &[("serviceAccountJSON", &bad_key), ("userData", BAD_USER_DATA), ("endpoint", &fake.url)],
    )
    .await;
    fake.fail(Fault {
        method: "GET",
        path_contains: "/instances/rejected-gcp".into(),
        status: 401,
        reason: "authError",
        message: format!("Invalid Credentials for key {bad_key} (user data {BAD_USER_DATA})"),
        times: usize::MAX,
    });
    secrets.add("rejected serviceAccountJSON", &bad_key);
    secrets.add_with_lines("rejected serviceAccountJSON private_key", &bad_pem);
    secrets.add_with_lines("rejected userData", BAD_USER_DATA);

    // A secret whose key is not JSON at all.
    let invalid = format!("{{\"type\": \"service_account\", \"private_key\": \"{INVALID_KEY_MATERIAL}");
    class_with_secret(
        &env,
        "gcp-invalid",
        "GCP",
        spec("shoot--gcp-invalid"),
        &[("serviceAccountJSON", &invalid), ("userData", USER_DATA), ("endpoint", &fake.url)],
    )
    .await;
    secrets.add("invalid serviceAccountJSON", &invalid);
    secrets.add("invalid serviceAccountJSON key material", INVALID_KEY_MATERIAL);

    let cloud = Gcp(fake);
    let captured =
        full_run(&env, &cloud, "gcp", &[("rejected-gcp", "gcp-rejected"), ("invalid-gcp", "gcp-invalid")]).await;
    // The bearer tokens the driver sent (signed with the key) are secrets too.
    let tokens: BTreeSet<String> = cloud
        .0
        .requests()
        .iter()
        .filter_map(|r| r.authorization.as_deref()?.strip_prefix("Bearer ").map(str::to_string))
        .collect();
    assert!(!tokens.is_empty(), "the driver authenticated with the key");
    for token in &tokens {
        secrets.add("a bearer token the driver sent", token);
    }
    assert!(
        cloud.0.requests().iter().any(|r| r.method == "GET" && r.path.contains("/instances/rejected-gcp")),
        "the rejected key's calls reached the fake (which answers them 401)"
    );
    assert_never_shown(&secrets, &captured);
    env.env.shutdown().await;
}
