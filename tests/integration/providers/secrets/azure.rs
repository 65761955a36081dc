//! The full run on the ARM fake: the service principal's client secret gets a token from the fake's authority;
//! a second class's client secret is refused there (`invalid_client`); a third secret names both a client secret
//! and a workload-identity token file.

use std::collections::BTreeSet;

use serde_json::json;

use super::super::azure::fake::{ArmFake, CLIENT_ID, CLIENT_SECRET, Kind, SUBSCRIPTION, TENANT, TOKEN};
use super::super::azure::machines::azure_class;
use super::super::azure::{USER_DATA, spec};
use super::{Cloud, Secrets, assert_never_shown, class_with_secret, full_run};
use crate::run::RunEnv;

/// The cluster [`azure_class`] tags its VMs for.
const CLUSTER: &str = "shoot--azure";
const REJECTED_SECRET: &str = "Rejected~Azure.Client-Secret_9f41d2";
const REJECTED_USER_DATA: &str = "#cloud-config\n# azure-rejected-user-data-77c1";
const INVALID_SECRET: &str = "Invalid~Azure.Client-Secret_3e0b5a";
const UNKNOWN_TENANT: &str = "00000000-0000-4000-8000-00000000dead";

struct Azure(ArmFake);

impl Cloud for Azure {
    const TARGET: &'static str = "mcm::providers::azure";

    async fn instances(&self) -> BTreeSet<String> {
        let key = format!("kubernetes.io-cluster-{CLUSTER}");
        self.0
            .names(Kind::Vm)
            .into_iter()
            .filter(|name| self.0.get(Kind::Vm, name).is_some_and(|vm| vm["tags"].get(&key).is_some()))
            .collect()
    }

    async fn plant_orphan(&self) -> String {
        let tags = json!({format!("kubernetes.io-cluster-{CLUSTER}"): "1", "kubernetes.io-role-node": "1"});
        self.0.insert(Kind::Vm, "forgotten", tags, json!({}));
        "forgotten".to_string()
    }

    async fn orphan_gone(&self, orphan: &str) -> bool {
        self.0.get(Kind::Vm, orphan).is_none()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_on_azure_never_shows_a_secret() {
    let arm = ArmFake::start().await;
    let env = RunEnv::start(0.2).await;
    let mut secrets = Secrets::default();

    // The class `azure` of the Azure scenario test: clientID, clientSecret, tenantID, subscriptionID, userData.
    azure_class(&env.env, &arm).await;
    secrets.add("clientSecret", CLIENT_SECRET);
    secrets.add("clientID", CLIENT_ID);
    secrets.add("tenantID", TENANT);
    secrets.add_with_lines("userData", USER_DATA);
    secrets.add("the bearer token the fake issued", TOKEN);
    // subscriptionID is not looked for: MCM's Azure providerIDs and every ARM resource ID name it.

    // A client secret the authority refuses.
    let common = [("clientID", CLIENT_ID), ("tenantID", TENANT), ("subscriptionID", SUBSCRIPTION)];
    let endpoints = [("endpoint", arm.url.as_str()), ("authorityHost", arm.url.as_str())];
    let rejected = [&common[..], &endpoints, &[("clientSecret", REJECTED_SECRET), ("userData", REJECTED_USER_DATA)]];
    class_with_secret(&env, "azure-rejected", "Azure", spec("shoot--azure-rejected"), &rejected.concat()).await;
    secrets.add("rejected clientSecret", REJECTED_SECRET);
    secrets.add_with_lines("rejected userData", REJECTED_USER_DATA);

    // An invalid secret: a client secret and a workload-identity token file exclude each other.
    let invalid = [
        &common[..],
        &endpoints,
        &[("clientSecret", INVALID_SECRET), ("workloadIdentityTokenFile", "/var/run/secrets/azure/token")],
        &[("userData", USER_DATA)],
    ];
    class_with_secret(&env, "azure-invalid", "Azure", spec("shoot--azure-invalid"), &invalid.concat()).await;
    secrets.add("invalid clientSecret", INVALID_SECRET);

    // A tenant the authority does not know: its error names the tenant.
    let unknown_tenant = [
        &[("clientID", CLIENT_ID), ("tenantID", UNKNOWN_TENANT), ("subscriptionID", SUBSCRIPTION)][..],
        &endpoints,
        &[("clientSecret", CLIENT_SECRET), ("userData", USER_DATA)],
    ];
    class_with_secret(&env, "azure-tenant", "Azure", spec("shoot--azure-tenant"), &unknown_tenant.concat()).await;
    secrets.add("unknown tenantID", UNKNOWN_TENANT);

    // ARM refusing a call with the client secret and the user data echoed in its message (the class `azure`'s
    // credentials, so the token is issued).
    arm.fail(
        "GET",
        "virtualMachines/echoed-azure",
        u32::MAX,
        403,
        "AuthorizationFailed",
        &format!("client secret {CLIENT_SECRET} with user data {USER_DATA} may not read the VM"),
    );

    let cloud = Azure(arm);
    let failing = [
        ("rejected-azure", "azure-rejected"),
        ("invalid-azure", "azure-invalid"),
        ("tenant-azure", "azure-tenant"),
        ("echoed-azure", "azure"),
    ];
    let captured = full_run(&env, &cloud, "azure", &failing).await;
    let tokens = cloud.0.requests().into_iter().filter(|r| r.path.ends_with("/oauth2/v2.0/token")).collect::<Vec<_>>();
    assert!(tokens.iter().any(|r| r.status == 200), "the client secret got a token");
    assert!(tokens.iter().any(|r| r.status == 401), "the rejected client secret was refused");
    assert_never_shown(&secrets, &captured);
    env.env.shutdown().await;
}
