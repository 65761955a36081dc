//! Shared helpers: a started API server with a client, CRD installation, and waiting on conditions.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use mcm::apiserver::{ApiServer, ServerConfig};
use mcm::dev::{ControlPlane, DevEnvironment, DevOptions};

use crate::kube::{KubeCluster, Roles};

/// A server on an ephemeral port and a client for it.
pub async fn start() -> (ApiServer, kube::Client) {
    start_with(ServerConfig::default()).await
}

/// A server with a custom configuration and a client for it.
pub async fn start_with(config: ServerConfig) -> (ApiServer, kube::Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let client = server.client().await.expect("client");
    (server, client)
}

/// Installs every CRD this project ships (MCM, infrastructure and CAPI core).
pub async fn install_crds(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in mcm::api::crds::files().expect("crds") {
        let crd: CustomResourceDefinition = serde_yaml::from_str(&file.yaml).expect("crd yaml");
        api.create(&PostParams::default(), &crd).await.unwrap_or_else(|e| panic!("{}: {e}", file.file_name));
    }
}

/// Starts `mcm dev`'s environment on the suite's backend: the embedded API server, or with
/// `MCM_TEST_APISERVER=kube` a fresh real cluster (returned too: it lives as long as the guard).
pub async fn start_dev(mut options: DevOptions) -> (DevEnvironment, Option<KubeCluster>) {
    let cluster = if crate::kube::enabled() {
        let roles = if options.controllers.capi_core { Roles::AdminMachineControllers } else { Roles::Shipped };
        Some(KubeCluster::start(roles).await)
    } else {
        None
    };
    options.external = cluster.as_ref().map(|c| c.external.clone());
    let dev = DevEnvironment::start(&options, |_| {}).await.unwrap();
    (dev, cluster)
}

/// A server kubectl can be pointed at.
pub trait KubeconfigSource {
    /// Writes an administrator's kubeconfig to `path`.
    fn write_admin_kubeconfig(&self, path: &std::path::Path);
}

impl KubeconfigSource for ApiServer {
    fn write_admin_kubeconfig(&self, path: &std::path::Path) {
        self.write_kubeconfig(path).unwrap();
    }
}

impl KubeconfigSource for ControlPlane {
    fn write_admin_kubeconfig(&self, path: &std::path::Path) {
        self.write_kubeconfig(path).unwrap();
    }
}

/// A port on 127.0.0.1 for a program a test starts with an explicit port (etcd, kube-apiserver, core's manager,
/// our webhook server, moto). Asking the kernel for a port (bind to port 0, then close) and naming it later
/// races: until the program binds it, the kernel may hand the same port to anything else binding port 0 — in
/// one CI run a plain-HTTP server answered on the port chosen for our webhook, and the API server's TLS
/// handshake with "our webhook" failed. So ports come from below the kernel's ephemeral range, where
/// nothing gets a port without naming it, and each is handed out once per test process.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = reserved_port_range();
    // Apart from the start, so that two test processes at once seldom walk the same ports.
    let start = std::process::id() % (high - low) / 2;
    for _ in 0..(high - low) {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % (high - low);
        let Ok(port) = u16::try_from(low + offset) else { continue };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port left in {low}..{high}");
}

/// The ports [`free_port`] hands out: from 10000 up to the start of the kernel's ephemeral range.
fn reserved_port_range() -> (u32, u32) {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    assert!(ephemeral_start > 12000, "the ephemeral port range starts at {ephemeral_start}: too low for free_port");
    (10000, ephemeral_start)
}

#[test]
fn free_ports_are_unique_and_outside_the_kernels_ephemeral_range() {
    let (low, high) = reserved_port_range();
    let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
    let unique: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
    assert_eq!(unique.len(), ports.len(), "a port handed out twice: {ports:?}");
    assert!(ports.iter().all(|&p| (low..high).contains(&u32::from(p))), "{ports:?}");
    // The kernel's own choice for port 0 lies outside, so it can never take one of ours.
    let kernels = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert!(!(low..high).contains(&u32::from(kernels)), "the kernel gave {kernels}");
}

/// Polls `check` until it returns `Some`, failing the test after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The real `kubectl` against one kubeconfig, with a fresh discovery cache (removed when dropped).
pub struct Kubectl {
    dir: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
}

impl Kubectl {
    /// kubectl for a server of this process (writes its kubeconfig into a fresh directory).
    pub fn new(server: &impl KubeconfigSource) -> Self {
        let dir = std::env::temp_dir().join(format!("mcm-kubectl-{}", uuid::Uuid::new_v4()));
        let kubeconfig = dir.join("kubeconfig");
        std::fs::create_dir_all(&dir).unwrap();
        server.write_admin_kubeconfig(&kubeconfig);
        Kubectl { dir, kubeconfig }
    }

    /// kubectl for an existing kubeconfig file (e.g. one `mcm dev` wrote).
    pub fn for_kubeconfig(kubeconfig: &std::path::Path) -> Self {
        let dir = std::env::temp_dir().join(format!("mcm-kubectl-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Kubectl { dir, kubeconfig: kubeconfig.to_path_buf() }
    }

    /// Writes a file (a manifest ...) next to the kubeconfig and returns its path.
    pub fn file(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A kubectl command with the kubeconfig and cache set.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs kubectl to completion: success, standard output, standard error.
    pub async fn try_run(&self, args: &[&str]) -> (bool, String, String) {
        let output = tokio::time::timeout(Duration::from_secs(120), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .expect("kubectl is installed (.ci/run installs Debian's kubernetes-client)");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        (output.status.success(), stdout, stderr)
    }

    /// Runs kubectl to completion; its standard output, failing the test when it fails.
    pub async fn run(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.try_run(args).await;
        assert!(ok, "kubectl {args:?} failed: {stderr}\n{stdout}");
        stdout
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh temporary directory, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// Creates it.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
