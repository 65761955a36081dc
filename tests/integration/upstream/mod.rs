//! Upstream programs drive ours: the real `clusterctl` and CAPI core's manager (built from the Go module proxy by
//! `hack/upstream-tools.sh`, pinned by `hack/upstream/go.mod`) against an embedded API server, with
//! `mcm run --controllers=infrastructure` and the in-memory cloud; upstream MCM (`make mcm-peer`) against the
//! in-memory cloud's node agent. docs/testing.md says what each test plays.
//!
//! Without the tools every test here is skipped with a loud message; in CI (`CI=true`) their absence fails.

#[cfg(feature = "aws")]
mod aws;
mod clusterctl;
mod differential;
mod installing;
mod mcm_in_place;
mod moving;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Api, ResourceExt};
use mcm::apiserver::{ApiServer, ServerConfig};
use mcm::providers::inmemory::{InMemoryCloud, Kubelet, KubeletConfig};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::run::McmRun;
use crate::support::{Kubectl, TempDir, free_port};

/// Long enough for anything these tests wait for on a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(120);

/// The built upstream programs and the offline clusterctl repository.
#[derive(Clone)]
pub struct Tools {
    bin: PathBuf,
    repository: PathBuf,
    capi_version: String,
    cert_manager_version: String,
}

impl Tools {
    /// The tools, or `None` (saying so loudly) when `make upstream-tools` has not built them. In CI a missing tool
    /// fails the test: CI always builds them.
    pub fn find(test: &str) -> Option<Tools> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/upstream");
        let bin = dir.join("bin");
        let versions = std::fs::read_to_string(dir.join("versions.env")).unwrap_or_default();
        let version = |key: &str| {
            versions.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_string).unwrap_or_default()
        };
        let tools = Tools {
            capi_version: version("CAPI_VERSION"),
            cert_manager_version: version("CERT_MANAGER_VERSION"),
            repository: dir.join("repository"),
            bin,
        };
        let built = ["clusterctl", "capi-manager"].iter().all(|b| tools.bin.join(b).is_file())
            && !tools.capi_version.is_empty()
            && !tools.cert_manager_version.is_empty();
        if built {
            return Some(tools);
        }
        let message = format!(
            "upstream tools missing in {}: run `make upstream-tools` (needs go; docs/testing.md)",
            dir.display()
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: {message}");
        eprintln!("\n*** SKIPPED {test}: {message} ***\n");
        None
    }

    fn path(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

/// Runs `tools`' clusterctl against `kubeconfig`: (success, stdout, stderr), or what it had printed to stderr
/// when it timed out. Its home is `home` (no `~/.cluster-api`), with no version check (that would call GitHub).
pub async fn clusterctl(
    tools: &Tools,
    home: &Path,
    kubeconfig: &Path,
    config: Option<&Path>,
    args: &[&str],
) -> Result<(bool, String, String), String> {
    let (out, err) = (home.join("clusterctl.stdout"), home.join("clusterctl.stderr"));
    let mut command = Command::new(tools.path("clusterctl"));
    command.args(args).arg("--kubeconfig").arg(kubeconfig);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("xdg"))
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("clusterctl runs");
    let status = tokio::time::timeout(WAIT, child.wait()).await;
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    match status {
        Ok(status) => Ok((status.unwrap().success(), stdout, stderr)),
        Err(_) => Err(format!("{stderr}\n{stdout}")),
    }
}

/// One management cluster: an embedded API server with `clusterctl init` done, the upstream core manager and
/// `mcm run --controllers=infrastructure` as processes, sharing one in-memory cloud whose kubelet registers Nodes
/// in `workload` (this server unless told otherwise).
pub struct Management {
    /// The API server.
    pub server: ApiServer,
    /// A client for it.
    pub client: kube::Client,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
    /// Files of this management cluster (clusterctl's config, certificates, logs).
    pub dir: TempDir,
    tools: Tools,
    core: Option<Child>,
    infra: Option<McmRun>,
    /// Extra flags for our manager (set before `init`).
    pub infra_flags: Vec<String>,
    /// `--webhook-port` and `--webhook-cert-dir` of our manager, once cert-manager's part is played.
    infra_webhook: Vec<String>,
}

/// The namespace the tests' clusters live in.
pub const NS: &str = "demo";

impl Management {
    /// Starts an API server and writes clusterctl's configuration for the offline repository and ours.
    pub async fn start(tools: Tools, name: &str) -> Management {
        let server = ApiServer::start(ServerConfig::default()).await.expect("server starts");
        let client = server.client().await.expect("client");
        let dir = TempDir::new(&format!("mcm-upstream-{name}"));
        let kubeconfig = dir.0.join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let management = Management {
            server,
            client,
            kubeconfig,
            dir,
            tools,
            core: None,
            infra: None,
            infra_flags: Vec::new(),
            infra_webhook: Vec::new(),
        };
        management.write_clusterctl_config().await;
        management
    }

    /// `clusterctl.yaml`: core and cert-manager from the offline repository, `mcm` from `make release-manifests`.
    async fn write_clusterctl_config(&self) {
        let release = self.dir.0.join("mcm-release");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/release-manifests.sh");
        let output = Command::new("bash").arg(script).arg(&release).output().await.unwrap();
        assert!(output.status.success(), "release-manifests: {}", String::from_utf8_lossy(&output.stderr));
        let mcm_version = format!("v{}", env!("CARGO_PKG_VERSION"));
        let repo = &self.tools.repository;
        let (capi, cert_manager) = (&self.tools.capi_version, &self.tools.cert_manager_version);
        let config = format!(
            "providers:\n\
             - name: cluster-api\n  type: CoreProvider\n  url: {repo}/cluster-api/{capi}/core-components.yaml\n\
             - name: mcm\n  type: InfrastructureProvider\n  url: {mcm}/infrastructure-mcm/{mcm_version}/infrastructure-components.yaml\n\
             cert-manager:\n  url: {repo}/cert-manager/{cert_manager}/cert-manager.yaml\n  version: {cert_manager}\n",
            repo = repo.display(),
            mcm = release.join("repository").display(),
        );
        std::fs::write(self.dir.0.join("clusterctl.yaml"), config).unwrap();
    }

    /// Runs clusterctl against this management cluster: (success, stdout, stderr).
    pub async fn clusterctl(&self, args: &[&str]) -> (bool, String, String) {
        let config = self.dir.0.join("clusterctl.yaml");
        let run = clusterctl(&self.tools, &self.dir.0, &self.kubeconfig, Some(&config), args).await;
        run.unwrap_or_else(|stderr| panic!("clusterctl {args:?} timed out:\n{stderr}\n{}", self.logs()))
    }

    /// clusterctl, failing the test when it fails; its stdout.
    pub async fn clusterctl_ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.clusterctl(args).await;
        assert!(ok, "clusterctl {args:?} failed:\n{stderr}\n{stdout}");
        stdout
    }

    /// `clusterctl init --core cluster-api --infrastructure mcm` (what it printed, stdout and stderr), then what the Pods of a real cluster would do:
    /// cert-manager's work for core's webhook (serving certificate, CA bundles), core's manager with that
    /// certificate (the EndpointSlice of its webhook Service points at it), and our manager.
    pub async fn init(&mut self, cloud_url: &str) -> String {
        let printed = self.install(&["--core", &self.core(), "--infrastructure", "mcm"]).await;
        let infra_webhook_port = self.play_cert_manager_and_start_core().await;
        self.start_infra(cloud_url);
        wait_for_port(infra_webhook_port).await;
        printed
    }

    /// The core provider for `clusterctl init --core`: `cluster-api:<the built version>`.
    pub fn core(&self) -> String {
        format!("cluster-api:{}", self.tools.capi_version)
    }

    /// `clusterctl init` with `args`, nothing started: what it printed, stdout and stderr.
    pub async fn install(&self, args: &[&str]) -> String {
        // No kubeadm bootstrap and control plane providers (clusterctl's default): the tests play those.
        let init = ["init", "--bootstrap", "-", "--control-plane", "-"];
        let (ok, stdout, stderr) = self.clusterctl(&[&init[..], args].concat()).await;
        assert!(ok, "clusterctl init {args:?} failed:\n{stderr}\n{stdout}");
        format!("{stdout}{stderr}")
    }

    /// The documented step for referenced MachineClasses where Gardener's MCM does not run: `kubectl create -f
    /// machineclass-crd.yaml` of the release (docs/clusterctl.md); waits until the kind is served.
    pub async fn create_machineclass_crd(&self) {
        let crd = self.dir.0.join("mcm-release/machineclass-crd.yaml");
        let kubectl = Kubectl::for_kubeconfig(&self.kubeconfig);
        kubectl.run(&["create", "-f", crd.to_str().unwrap()]).await;
        let classes: Api<DynamicObject> = Api::all_with(self.client.clone(), &machine_classes());
        self.wait("MachineClasses to be served", || async { classes.list(&Default::default()).await.ok().map(drop) })
            .await;
    }

    /// What cert-manager, its CA injector and the kubelet running core's Pod would do.
    /// Returns the port our manager's webhooks are to be served on.
    async fn play_cert_manager_and_start_core(&mut self) -> u16 {
        let webhook_port = free_port();
        let certs = self.dir.0.join("core-webhook-certs");
        std::fs::create_dir_all(&certs).unwrap();
        // One certificate for both providers' webhook Services (cert-manager would issue one each).
        let (ca_pem, cert_pem, key_pem) =
            serving_certificate(&["capi-webhook-service.capi-system.svc", "mcm-webhook-service.mcm-system.svc"]);
        std::fs::write(certs.join("tls.crt"), &cert_pem).unwrap();
        std::fs::write(certs.join("tls.key"), &key_pem).unwrap();
        // cert-manager: the Secret its Certificate names.
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "capi-system");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "capi-webhook-service-cert"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert_pem, "tls.key": key_pem, "ca.crt": ca_pem},
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &secret).await.unwrap();
        // cainjector: the CA bundle into every webhook configuration and CRD that asks for it.
        let bundle = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_pem.as_bytes());
        self.inject_ca_bundle(&bundle).await;
        // The kubelet and the EndpointSlice controller: core's manager serving its webhook on loopback.
        self.endpoints_for("capi-system", "capi-webhook-service", webhook_port).await;
        // Ours: `mcm run --webhook-port` (start_infra) with the same certificate directory.
        let infra_webhook_port = free_port();
        self.endpoints_for("mcm-system", "mcm-webhook-service", infra_webhook_port).await;
        self.infra_webhook =
            vec![format!("--webhook-port={infra_webhook_port}"), format!("--webhook-cert-dir={}", certs.display())];
        let log = std::fs::File::create(self.dir.0.join("capi-manager.log")).unwrap();
        let core = Command::new(self.tools.path("capi-manager"))
            .env("KUBECONFIG", &self.kubeconfig)
            .args(["--leader-elect=false", "--insecure-diagnostics=true"])
            .args(["--diagnostics-address", &format!("127.0.0.1:{}", free_port())])
            .args(["--health-addr", &format!("127.0.0.1:{}", free_port())])
            .args(["--webhook-port", &webhook_port.to_string()])
            .arg("--webhook-cert-dir")
            .arg(&certs)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("capi-manager starts");
        self.core = Some(core);
        wait_for_port(webhook_port).await;
        infra_webhook_port
    }

    /// Sets `caBundle` where cert-manager's CA injector would: webhook configurations and conversion webhooks of
    /// CRDs annotated with `cert-manager.io/inject-ca-from`.
    async fn inject_ca_bundle(&self, bundle: &str) {
        for (group, version, kind, plural) in [
            ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
            ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions"),
        ] {
            let resource = ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: format!("{group}/{version}"),
                kind: kind.into(),
                plural: plural.into(),
            };
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            for object in api.list(&Default::default()).await.unwrap() {
                if !object.annotations().contains_key("cert-manager.io/inject-ca-from") {
                    continue;
                }
                let mut data = object.data.clone();
                if kind == "CustomResourceDefinition" {
                    if data.pointer("/spec/conversion/webhook/clientConfig").is_none() {
                        continue;
                    }
                    data["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = json!(bundle);
                } else {
                    for webhook in data["webhooks"].as_array_mut().into_iter().flatten() {
                        webhook["clientConfig"]["caBundle"] = json!(bundle);
                    }
                }
                let patch = match kind {
                    "CustomResourceDefinition" => json!({"spec": data["spec"]}),
                    _ => json!({"webhooks": data["webhooks"]}),
                };
                api.patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            }
        }
    }

    /// An Endpoints object and an EndpointSlice for Service `name`, pointing at 127.0.0.1:`port`.
    async fn endpoints_for(&self, namespace: &str, name: &str, port: u16) {
        let slices = ApiResource {
            group: "discovery.k8s.io".into(),
            version: "v1".into(),
            api_version: "discovery.k8s.io/v1".into(),
            kind: "EndpointSlice".into(),
            plural: "endpointslices".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &slices);
        let slice: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-local"), "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "", "port": port, "protocol": "TCP"}],
        }))
        .unwrap();
        api.create(&PostParams::default(), &slice).await.unwrap();
        let endpoints: Api<k8s_openapi::api::core::v1::Endpoints> = Api::namespaced(self.client.clone(), namespace);
        let object = serde_json::from_value(json!({
            "metadata": {"name": name},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port, "protocol": "TCP"}]}],
        }))
        .unwrap();
        endpoints.create(&PostParams::default(), &object).await.unwrap();
    }

    /// Our manager, as the installed Deployment runs it (config/manager/manager.yaml), on the in-memory cloud.
    fn start_infra(&mut self, cloud_url: &str) {
        let mut flags = vec!["--controllers=infrastructure", "--target-kubeconfig=none", "--leader-elect=false"];
        flags.extend(self.infra_webhook.iter().map(String::as_str));
        flags.extend(self.infra_flags.iter().map(String::as_str));
        self.infra = Some(McmRun::spawn_in(NS, "mcm-infrastructure", &self.kubeconfig, cloud_url, &self.dir.0, &flags));
    }

    /// The test namespace, and `<cluster>-kubeconfig` pointing at `workload` (where the kubelet registers
    /// Nodes): core reads Nodes through it, as it would through a control plane provider's Secret.
    pub async fn prepare_cluster(&self, cluster: &str, workload: &ApiServer) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        if namespaces.get_opt(NS).await.unwrap().is_none() {
            let ns = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
            namespaces.create(&PostParams::default(), &ns).await.unwrap();
        }
        let file = self.dir.0.join(format!("{cluster}-workload-kubeconfig"));
        workload.write_kubeconfig(&file).unwrap();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{cluster}-kubeconfig"), "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": std::fs::read_to_string(&file).unwrap()},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), NS).create(&PostParams::default(), &secret).await.unwrap();
    }

    /// `clusterctl generate cluster <cluster> --flavor inmemory --worker-machine-count <workers>` into the test
    /// namespace: the manifest.
    pub async fn generate(&self, cluster: &str, workers: u32) -> String {
        let count = workers.to_string();
        let args = ["generate", "cluster", cluster, "--flavor", "inmemory", "--worker-machine-count", &count];
        self.clusterctl_ok(&[&args[..], &["--target-namespace", NS]].concat()).await
    }

    /// [`Self::generate`], applied with `kubectl apply -f`; the kubectl used.
    pub async fn generate_and_apply(&self, cluster: &str, workers: u32) -> Kubectl {
        let manifest = self.generate(cluster, workers).await;
        let kubectl = Kubectl::for_kubeconfig(&self.kubeconfig);
        let file = kubectl.file(&format!("{cluster}.yaml"), &manifest);
        kubectl.run(&["apply", "-f", file.to_str().unwrap()]).await;
        kubectl
    }

    /// The last lines of core's log and our manager's stderr, for failure messages.
    pub fn logs(&self) -> String {
        let tail = |path: PathBuf| {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        format!(
            "--- capi-manager (last lines) ---\n{}\n--- mcm run (last lines) ---\n{}",
            tail(self.dir.0.join("capi-manager.log")),
            tail(self.dir.0.join("mcm-infrastructure.stderr"))
        )
    }

    /// Polls `check` until it returns `Some`; on timeout fails with both managers' last log lines.
    pub async fn wait<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out after {WAIT:?} waiting for {what}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An in-memory cloud served on loopback (as `mcm dev` serves its own) with its kubelet registering Nodes in
/// `workload`.
pub struct Cloud {
    /// The cloud.
    pub cloud: InMemoryCloud,
    /// Its URL for `mcm run --inmemory-cloud-url`.
    pub url: String,
    server: tokio::task::JoinHandle<()>,
    kubelet: Option<Kubelet>,
}

impl Cloud {
    /// Starts it.
    pub async fn start(workload: &kube::Client) -> Cloud {
        let cloud = InMemoryCloud::with_seed(18);
        let (addr, server) =
            mcm::providers::inmemory::remote::serve(cloud.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .unwrap();
        let kubelet = Kubelet::spawn(cloud.clone(), workload.clone(), KubeletConfig::default());
        Cloud { cloud, url: format!("http://{addr}"), server, kubelet: Some(kubelet) }
    }

    /// Stops the kubelet and the server.
    pub async fn stop(mut self) {
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await;
        }
        self.server.abort();
    }
}

/// Waits until something listens on 127.0.0.1:`port`.
async fn wait_for_port(port: u16) {
    crate::support::wait_until(&format!("a listener on port {port}"), WAIT, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
    })
    .await;
}

/// A throw-away CA and a serving certificate signed by it for `names` and 127.0.0.1: (CA, certificate, key), PEM.
fn serving_certificate(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let mut sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    sans.push("127.0.0.1".into());
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(sans).unwrap().signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

pub fn capi(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// MCM's MachineClass.
pub fn machine_classes() -> ApiResource {
    ApiResource {
        group: "machine.sapcloud.io".into(),
        version: "v1alpha1".into(),
        api_version: "machine.sapcloud.io/v1alpha1".into(),
        kind: "MachineClass".into(),
        plural: "machineclasses".into(),
    }
}

pub fn infra(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Every object of `resource` in the test namespace, as JSON.
pub async fn list(client: &kube::Client, resource: &ApiResource, selector: &str) -> Vec<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, resource);
    let params = ListParams::default().labels(selector);
    match api.list(&params).await {
        Ok(list) => list.items.into_iter().map(|o| serde_json::to_value(o).unwrap()).collect(),
        Err(_) => Vec::new(),
    }
}

/// The worker Machines of deployment `md` if there are exactly `n`, each `Running` with the nodeRef and
/// providerID upstream core set, and the in-memory cloud has one live VM for each (plus `others`).
pub async fn workers(m: &Management, cloud: &Cloud, md: &str, n: usize, others: usize) -> Option<Vec<Value>> {
    running_machines(&m.client, &cloud.cloud, md, n, others).await
}

/// [`workers`] on any API server and cloud.
pub async fn running_machines(
    client: &kube::Client,
    cloud: &InMemoryCloud,
    md: &str,
    n: usize,
    others: usize,
) -> Option<Vec<Value>> {
    let selector = format!("cluster.x-k8s.io/deployment-name={md}");
    let machines = list(client, &capi("Machine", "machines"), &selector).await;
    let ready = machines.len() == n
        && machines.iter().all(|machine| {
            text(machine, "/status/phase") == "Running"
                && !text(machine, "/status/nodeRef/name").is_empty()
                && text(machine, "/spec/providerID").starts_with("inmemory://")
                && machine.pointer("/metadata/deletionTimestamp").is_none()
        });
    (ready && cloud.live_vms().len() == n + others).then_some(machines)
}

/// Waits for [`workers`].
pub async fn running_workers(m: &Management, cloud: &Cloud, md: &str, n: usize, others: usize) -> Vec<Value> {
    let what = format!("{n} Running Machines of {md} with nodeRef and providerID, {} live VMs", n + others);
    m.wait(&what, || workers(m, cloud, md, n, others)).await
}

/// A control-plane Machine on our provider. Core counts the control plane of a Cluster without a control plane
/// provider as initialized once such a Machine has a Node; MachineHealthChecks wait for that.
/// Its class is inline, or MachineClass `class`.
pub async fn control_plane_machine(client: &kube::Client, cluster: &str, class: Option<&str>) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), NS);
    let bootstrap = serde_json::from_value(json!({
        "metadata": {"name": format!("{cluster}-cp-bootstrap"), "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &bootstrap).await.unwrap();
    let create = |resource: ApiResource, object: Value| async move {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
        api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    };
    let labels = json!({"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""});
    create(
        infra("MCMMachine", "mcmmachines"),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine",
            "metadata": {"name": format!("{cluster}-cp-0"), "labels": labels},
            "spec": match class {
                Some(name) => json!({"class": {"kind": "MachineClass", "name": name}}),
                None => json!({"inlineClass": {"provider": "InMemory", "providerSpec": {
                    "machineType": "m.small", "region": "local", "zone": "local-a", "bootSeconds": 0.5,
                    "kubeletVersion": "v1.34.1",
                    "tags": {format!("kubernetes.io/cluster/{cluster}"): "1", "kubernetes.io/role/node": "1"},
                }}}),
            },
        }),
    )
    .await;
    create(
        capi("Machine", "machines"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": format!("{cluster}-cp-0"), "labels": labels},
            "spec": {
                "clusterName": cluster,
                "version": "v1.34.1",
                "bootstrap": {"dataSecretName": format!("{cluster}-cp-bootstrap")},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine", "name": format!("{cluster}-cp-0")},
            },
        }),
    )
    .await;
}

/// A JSON value's string at `pointer`, or "".
pub fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}
