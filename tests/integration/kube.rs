//! The suite's second backend. With `MCM_TEST_APISERVER=kube` every environment runs against a real etcd,
//! kube-apiserver and kube-controller-manager (built by `make upstream-tools` into target/upstream/bin) instead of
//! the embedded API server, and the controllers authenticate as the ServiceAccounts our shipped roles bind:
//! `config/rbac` for the infrastructure provider, `config/rbac-mcm` for the MCM flavour. A call those roles do not
//! allow is refused by the real authorizer and the test fails. docs/testing.md says what runs where.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use mcm::dev::ExternalCluster;
use tokio::process::{Child, Command};

use crate::support::{Kubectl, TempDir, free_port};

/// Whether this run uses the real kube-apiserver.
pub fn enabled() -> bool {
    std::env::var("MCM_TEST_APISERVER").is_ok_and(|v| v == "kube")
}

/// Where the ServiceAccounts of the shipped roles live (`config/default`'s and `config/rbac-mcm`'s namespace).
const SYSTEM_NAMESPACE: &str = "mcm-system";
/// The infrastructure provider's ServiceAccount (`config/rbac` with `config/default`'s name prefix).
const INFRASTRUCTURE_ACCOUNT: &str = "mcm-manager";
/// The MCM flavour's ServiceAccount (`config/rbac-mcm`).
const MACHINE_ACCOUNT: &str = "machine-controller-manager";

/// What `make upstream-tools` builds for this backend.
const PROGRAMS: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

fn bin() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/upstream/bin")
}

/// The audit policy: our controllers' requests, metadata only (never bodies: they may carry Secrets).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: [\"system:serviceaccounts:mcm-system\"]
- level: None
";

/// Long enough for a cold kube-apiserver on a busy machine.
const START: Duration = Duration::from_secs(90);

/// A running etcd + kube-apiserver + kube-controller-manager on loopback; killed when dropped.
pub struct KubeCluster {
    /// The cluster as `mcm dev` takes it: the administrator's and the controllers' kubeconfigs.
    pub external: ExternalCluster,
    children: Vec<(String, Child)>,
    dir: TempDir,
}

/// What the roles of a controller identity are checked against.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Roles {
    /// Both controller identities use their shipped roles.
    Shipped,
    /// The MCM-flavour controllers run as the administrator: in "CAPI with MCM core" mode they also serve the
    /// cluster.x-k8s.io kinds, for which no role is shipped yet (docs/testing.md).
    AdminMachineControllers,
}

impl KubeCluster {
    /// Whether `make upstream-tools` built the programs; when not, says so loudly (and fails under `CI=true`,
    /// where they are always built).
    pub fn built(test: &str) -> bool {
        let built = PROGRAMS.iter().all(|p| bin().join(p).is_file());
        if !built {
            let message =
                format!("{test}: kube-apiserver, kube-controller-manager or etcd missing in {}", bin().display());
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
            eprintln!("*** SKIPPED {message}: run `make upstream-tools` (docs/testing.md)");
        }
        built
    }

    /// A client with the administrator's credentials.
    pub async fn admin_client(&self) -> kube::Client {
        client_for(&self.external.admin).await
    }

    /// The administrator's kubeconfig file.
    pub fn admin_kubeconfig_file(&self) -> std::path::PathBuf {
        self.dir.0.join("admin.kubeconfig")
    }

    /// Starts the processes, installs our CRDs and the shipped roles, and issues ServiceAccount tokens.
    pub async fn start(roles: Roles) -> KubeCluster {
        Self::start_with(roles, true).await
    }

    /// The same, installing every CRD we ship only when `crds` (a test that installs what clusterctl would says
    /// false).
    pub async fn start_with(roles: Roles, crds: bool) -> KubeCluster {
        let bin = bin();
        for program in PROGRAMS {
            assert!(
                bin.join(program).is_file(),
                "MCM_TEST_APISERVER=kube needs {program} in {}: run `make upstream-tools` (docs/testing.md)",
                bin.display()
            );
        }
        let dir = TempDir::new("mcm-kube");
        let path = |name: &str| dir.0.join(name);
        let pki = Pki::new();
        std::fs::write(path("ca.crt"), &pki.ca).unwrap();
        std::fs::write(path("apiserver.crt"), &pki.serving.0).unwrap();
        std::fs::write(path("apiserver.key"), &pki.serving.1).unwrap();
        std::fs::write(path("service-accounts.key"), &pki.service_account_key.0).unwrap();
        std::fs::write(path("service-accounts.pub"), &pki.service_account_key.1).unwrap();

        std::fs::write(path("audit-policy.yaml"), AUDIT_POLICY).unwrap();
        let (client_port, peer_port, secure_port) = (free_port(), free_port(), free_port());
        let mut children = Vec::new();
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        children.push(spawn(
            &dir.0,
            "etcd",
            &bin.join("etcd"),
            &[
                "--name=default".into(),
                format!("--data-dir={}", path("etcd").display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                // A test cluster: durability is not the point, speed is.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
        ));
        let url = format!("https://127.0.0.1:{secure_port}");
        children.push(spawn(
            &dir.0,
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={client_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={secure_port}"),
                format!("--cert-dir={}", path("certs").display()),
                format!("--tls-cert-file={}", path("apiserver.crt").display()),
                format!("--tls-private-key-file={}", path("apiserver.key").display()),
                format!("--client-ca-file={}", path("ca.crt").display()),
                format!("--service-account-key-file={}", path("service-accounts.pub").display()),
                format!("--service-account-signing-key-file={}", path("service-accounts.key").display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--service-cluster-ip-range=10.96.0.0/24".into(),
                "--authorization-mode=Node,RBAC".into(),
                // No ServiceAccount controller runs to make each namespace's `default` account, which that
                // admission plugin requires of every Pod (the drain tests create Pods); no node lifecycle controller
                // runs to lift the not-ready taint the other plugin puts on every new Node. The embedded server does
                // neither.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--audit-policy-file={}", path("audit-policy.yaml").display()),
                format!("--audit-log-path={}", path("audit.log").display()),
                "--profiling=false".into(),
            ],
        ));

        let admin = pki.admin_kubeconfig(&url);
        let admin_kubeconfig = path("admin.kubeconfig");
        std::fs::write(&admin_kubeconfig, &admin).unwrap();
        let client = client_for(&admin).await;
        let deadline = tokio::time::Instant::now() + START;
        loop {
            let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
            if client.request_text(request).await.is_ok_and(|body| body.trim() == "ok") {
                break;
            }
            let exited = children.iter_mut().any(|(_, child)| matches!(child.try_wait(), Ok(Some(_))));
            if exited || tokio::time::Instant::now() > deadline {
                panic!("kube-apiserver did not become ready\n{}", logs(&dir.0, &mut children));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // CRDs before the controller manager: its garbage collector learns resources from discovery, then only
        // every 30 s.
        if crds {
            mcm::dev::install_crds(&client).await.expect("the real kube-apiserver accepts our CRDs");
            // Served only once Established, a moment after the create.
            let kubectl = Kubectl::for_kubeconfig(&admin_kubeconfig);
            kubectl.run(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]).await;
        }
        let kubectl = Kubectl::for_kubeconfig(&admin_kubeconfig);
        let manifests = shipped_roles();
        let file = kubectl.file("roles.yaml", &manifests);
        kubectl.run(&["apply", "-f", file.to_str().unwrap()]).await;
        let token_for = async |account: &str| {
            let token = kubectl
                .run(&["-n", SYSTEM_NAMESPACE, "create", "token", account, "--duration=24h"])
                .await
                .trim()
                .to_string();
            pki.token_kubeconfig(&url, account, &token)
        };
        let infrastructure = token_for(INFRASTRUCTURE_ACCOUNT).await;
        let machines = token_for(MACHINE_ACCOUNT).await;

        children.push(spawn(
            &dir.0,
            "kube-controller-manager",
            &bin.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", admin_kubeconfig.display()),
                "--controllers=garbagecollector,namespace,disruption".into(),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--use-service-account-credentials=false".into(),
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
            ],
        ));
        let external = ExternalCluster {
            url,
            admin,
            machine_controllers: (roles == Roles::Shipped).then_some(machines),
            infrastructure_controllers: Some(infrastructure),
        };
        KubeCluster { external, children, dir }
    }

    /// The requests of our controllers the real authorizer refused (403), as `user verb URI`. Every test on this
    /// backend ends by asserting there are none: a call our shipped roles do not allow is a bug even when the
    /// controllers recover from it.
    pub fn forbidden_requests(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.0.join("audit.log")).unwrap_or_default();
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["stage"] == "ResponseComplete" && event["responseStatus"]["code"] == 403)
            .map(|event| {
                format!(
                    "{} {} {}",
                    event["user"]["username"].as_str().unwrap_or_default(),
                    event["verb"].as_str().unwrap_or_default(),
                    event["requestURI"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// Fails the test when the controllers made a request the shipped roles do not allow.
    pub fn assert_nothing_forbidden(&self) {
        let forbidden = self.forbidden_requests();
        assert!(forbidden.is_empty(), "requests the shipped roles do not allow:\n{}", forbidden.join("\n"));
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        // Controller manager first, etcd last; `kill_on_drop` is the net under this.
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.start_kill();
        }
        // Every test on this backend is also an RBAC test (a second panic while one unwinds would abort).
        if !std::thread::panicking() {
            self.assert_nothing_forbidden();
        }
    }
}

/// Spawns `program` with its output in `dir/<name>.log`.
fn spawn(dir: &Path, name: &str, program: &Path, args: &[String]) -> (String, Child) {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    (name.to_string(), child)
}

/// Each process's state and the tail of its log.
fn logs(dir: &Path, children: &mut [(String, Child)]) -> String {
    let mut out = String::new();
    for (name, child) in children.iter_mut() {
        let state = match child.try_wait() {
            Ok(Some(status)) => format!("exited: {status}"),
            _ => "running".to_string(),
        };
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        out.push_str(&format!("--- {name} ({state})\n"));
        for line in tail.into_iter().rev() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The RBAC objects of the shipped manifests: `config/default` rendered as clusterctl installs it (only its
/// ServiceAccount, roles and bindings, and the namespace they live in) and `config/rbac-mcm`.
fn shipped_roles() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let render = |dir: &str| {
        let output = std::process::Command::new("kubectl")
            .args(["kustomize", root.join(dir).to_str().unwrap()])
            .output()
            .expect("kubectl is installed");
        assert!(output.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let wanted = ["ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];
    let mut docs = vec![format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SYSTEM_NAMESPACE}\n")];
    for dir in ["config/default", "config/rbac-mcm"] {
        for doc in render(dir).split("\n---\n") {
            let value: serde_json::Value = serde_yaml::from_str(doc).unwrap();
            if wanted.contains(&value["kind"].as_str().unwrap_or_default()) {
                docs.push(doc.to_string());
            }
        }
    }
    docs.join("\n---\n")
}

/// A client for a kubeconfig (YAML).
async fn client_for(kubeconfig: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The test cluster's certificates and keys (PEM): one CA for serving and client certificates.
struct Pki {
    ca: String,
    serving: (String, String),
    admin: (String, String),
    /// Private and public key.
    service_account_key: (String, String),
}

impl Pki {
    fn new() -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.distinguished_name.push(DnType::CommonName, "mcm-test-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let names = ["localhost", "127.0.0.1", "kubernetes", "kubernetes.default.svc", "10.96.0.1"];
        let mut serving = CertificateParams::new(names.map(String::from).to_vec()).unwrap();
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate().unwrap();
        let serving = serving.signed_by(&serving_key, &ca).unwrap();
        // Group system:masters: the administrator of a cluster (and of its controller manager here).
        let mut admin = CertificateParams::new(Vec::<String>::new()).unwrap();
        admin.distinguished_name.push(DnType::CommonName, "mcm-test-admin");
        admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_key = KeyPair::generate().unwrap();
        let admin = admin.signed_by(&admin_key, &ca).unwrap();
        Pki {
            ca: ca.pem(),
            serving: (serving.pem(), serving_key.serialize_pem()),
            admin: (admin.pem(), admin_key.serialize_pem()),
            service_account_key: {
                let key = KeyPair::generate().unwrap();
                (key.serialize_pem(), key.public_key_pem())
            },
        }
    }

    fn admin_kubeconfig(&self, url: &str) -> String {
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&self.admin.0),
            b64(&self.admin.1)
        );
        self.kubeconfig(url, "admin", &user)
    }

    fn token_kubeconfig(&self, url: &str, account: &str, token: &str) -> String {
        self.kubeconfig(url, account, &format!("    token: {token}\n"))
    }

    fn kubeconfig(&self, url: &str, user: &str, credentials: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {user}\n  context:\n    cluster: kube\n    user: {user}\n    namespace: default\ncurrent-context: {user}\nusers:\n- name: {user}\n  user:\n{credentials}preferences: {{}}\n"
        )
    }
}
