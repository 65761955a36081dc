//! [`AzureDriver`]: the [`Driver`] contract over Azure Resource Manager.
//!
//! Requests go through the SDK's clients (URLs, api-versions, bearer tokens, retries of 429/5xx honouring
//! Retry-After). Long-running PUTs and DELETEs are sent with `.send()` (never the SDK's own poller, which can loop
//! for ever) and their `Azure-AsyncOperation` / `Location` URLs are polled here with bounded back-off. Answers are
//! read as plain JSON (name, tags, provisioning state, IP), never logged whole.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_core::auth::TokenCredential;
use azure_core::headers::{AUTHORIZATION, AZURE_ASYNCOPERATION, LOCATION, RETRY_AFTER};
use azure_core::{ClientOptions, Context, Method, Pipeline, Request, RetryOptions, TransportOptions, Url};
use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::NodeAddress;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::credentials::{self, Credential, Credentials, Endpoints};
use super::errors::Failure;
use super::request;
use super::spec::ProviderSpec;
use crate::providers::{
    ClassInfo, Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse, SecretData,
};

/// The `MachineClass.provider` value the Azure driver serves.
pub const PROVIDER: &str = "Azure";

/// The compute api-version of the SDK's default tag, used for the VM PUT the driver sends itself.
const VM_API_VERSION: &str = "2024-07-01";

/// Clients are cached per endpoints and credentials (so tokens are reused); past this many the cache starts afresh.
const MAX_CACHED_CLIENTS: usize = 64;

/// Tunables; the defaults suit Azure, tests shorten them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureSettings {
    /// Attempts per ARM request, throttling (429) and server errors included.
    pub max_attempts: u32,
    /// The first back-off between attempts when ARM gives no Retry-After; it doubles up to `max_retry_delay`.
    pub initial_backoff: Duration,
    /// The longest back-off between attempts.
    pub max_retry_delay: Duration,
    /// The longest Retry-After honoured (a longer one is cut to this).
    pub max_retry_after: Duration,
    /// Time limit of one HTTP request.
    pub request_timeout: Duration,
    /// The first pause while polling a long-running operation without Retry-After; it doubles up to `max_poll`.
    pub first_poll: Duration,
    /// The longest pause between polls.
    pub max_poll: Duration,
    /// How long one long-running operation (creating a VM, deleting one) is awaited before the call returns
    /// `DeadlineExceeded` (a retried call picks the resource up where it is).
    pub operation_timeout: Duration,
}

impl Default for AzureSettings {
    fn default() -> Self {
        AzureSettings {
            max_attempts: 4,
            initial_backoff: Duration::from_secs(1),
            max_retry_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            request_timeout: Duration::from_secs(60),
            first_poll: Duration::from_secs(2),
            max_poll: Duration::from_secs(15),
            operation_timeout: Duration::from_secs(600),
        }
    }
}

/// The Azure driver (provider `Azure`), compatible with Gardener's Azure MachineClasses; see
/// `docs/providers/azure.md`.
///
/// Credentials, resource group and endpoints come with each request (class secret and providerSpec), so one driver
/// serves every class. `Debug` shows no credentials.
pub struct AzureDriver {
    endpoints: Endpoints,
    settings: AzureSettings,
    clients: Mutex<HashMap<String, Clients>>,
}

impl fmt::Debug for AzureDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = self.clients.lock().map(|c| c.len()).unwrap_or_default();
        f.debug_struct("AzureDriver")
            .field("endpoints", &self.endpoints)
            .field("settings", &self.settings)
            .field("cached_clients", &cached)
            .finish()
    }
}

impl Default for AzureDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl AzureDriver {
    /// A driver for Azure's public cloud (or the class's `cloudConfiguration`, or a class secret's `endpoint` and
    /// `authorityHost`).
    pub fn new() -> Self {
        // The SDK's reqwest brings rustls with ring while kube brings aws-lc-rs: pick one before any TLS config.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        AzureDriver {
            endpoints: Endpoints { arm: String::new(), authority: String::new() },
            settings: AzureSettings::default(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// A driver for other endpoints: an ARM base URL and a token authority (a local fake in tests, a sovereign or
    /// private cloud). A class secret's `endpoint` / `authorityHost` still win.
    pub fn with_endpoints(arm: impl Into<String>, authority: impl Into<String>) -> Self {
        AzureDriver { endpoints: Endpoints { arm: arm.into(), authority: authority.into() }, ..Self::new() }
    }

    /// The same driver with other tunables.
    pub fn with_settings(mut self, settings: AzureSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The tunables in use.
    pub fn settings(&self) -> &AzureSettings {
        &self.settings
    }

    /// The clients for the request's endpoints and credentials.
    fn clients(&self, spec: &ProviderSpec, secret: &SecretData) -> Result<(Clients, String), DriverError> {
        let creds = Credentials::from_secret(secret)?;
        let endpoints = credentials::endpoints(secret, &self.endpoints, credentials::cloud_endpoints(&spec.cloud))?;
        let token_file = match &creds.credential {
            Credential::WorkloadIdentity(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                DriverError::new(
                    Code::Unauthenticated,
                    format!("secret: cannot read workloadIdentityTokenFile {path:?}: {}", e.kind()),
                )
            })?),
            Credential::ClientSecret(_) => None,
        };
        let key = cache_key(&endpoints, &creds, token_file.as_deref());
        let subscription = creds.subscription_id.expose().to_string();
        if let Some(clients) = self.clients.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok((clients, subscription));
        }
        let clients = Clients::new(&endpoints, &creds, token_file, &self.settings)?;
        if let Ok(mut cache) = self.clients.lock() {
            if cache.len() >= MAX_CACHED_CLIENTS {
                cache.clear();
            }
            cache.insert(key, clients.clone());
        }
        Ok((clients, subscription))
    }

    /// The parsed spec and clients, for a class that must be ours.
    fn prepare(&self, class: &ClassInfo, secret: &SecretData) -> Result<Arm<'_>, DriverError> {
        let spec = spec_of(class)?;
        let (clients, subscription) = self.clients(&spec, secret)?;
        Ok(Arm { clients, spec, subscription, secret: secret.clone(), settings: &self.settings })
    }

    /// As [`Self::prepare`], for a request that must name its machine; also answers the VM's name.
    fn prepare_machine(&self, request: &MachineRequest) -> Result<(Arm<'_>, String), DriverError> {
        let spec = spec_of(&request.class)?;
        if request.machine.name.is_empty() {
            return Err(DriverError::new(Code::InvalidArgument, "the machine has no name"));
        }
        if let Some(id) = request.machine.provider_id.as_deref().filter(|id| !id.is_empty()) {
            request::parse_provider_id(id)?;
        }
        let (clients, subscription) = self.clients(&spec, &request.secret)?;
        let arm = Arm { clients, spec, subscription, secret: request.secret.clone(), settings: &self.settings };
        Ok((arm, request::vm_name(&request.machine.name)))
    }

    /// As [`Self::prepare_machine`] for a deletion: a providerID alone names the VM (an orphan may have no machine
    /// name). A providerID of another resource group than the class's is refused (`NotFound`: left alone).
    fn prepare_deletion(&self, request: &MachineRequest) -> Result<(Arm<'_>, String), DriverError> {
        let Some(id) = request.machine.provider_id.as_deref().filter(|id| !id.is_empty()) else {
            return self.prepare_machine(request);
        };
        let spec = spec_of(&request.class)?;
        let parsed = request::parse_provider_id(id)?;
        if parsed.resource_group.as_deref().is_some_and(|rg| !rg.eq_ignore_ascii_case(&spec.resource_group)) {
            return Err(DriverError::new(
                Code::NotFound,
                format!("providerID {id} is not in the class's resource group {}; left alone", spec.resource_group),
            ));
        }
        let (clients, subscription) = self.clients(&spec, &request.secret)?;
        let arm = Arm { clients, spec, subscription, secret: request.secret.clone(), settings: &self.settings };
        Ok((arm, parsed.vm))
    }
}

/// A hash naming one client configuration (never the credentials themselves).
fn cache_key(endpoints: &Endpoints, creds: &Credentials, token: Option<&str>) -> String {
    let mut h = Sha256::new();
    let secret = match &creds.credential {
        Credential::ClientSecret(s) => s.expose(),
        Credential::WorkloadIdentity(_) => token.unwrap_or_default(),
    };
    for part in [&endpoints.arm, &endpoints.authority, creds.tenant_id.expose(), creds.client_id.expose(), secret] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The class's providerSpec, once the class is known to be ours.
fn spec_of(class: &ClassInfo) -> Result<ProviderSpec, DriverError> {
    if class.provider != PROVIDER {
        return Err(DriverError::new(
            Code::InvalidArgument,
            format!(
                "machine class {:?} has provider {:?}, this driver serves {PROVIDER:?}",
                class.name, class.provider
            ),
        ));
    }
    ProviderSpec::parse(&class.provider_spec)
}

/// Retries of one ARM request: 408, 429 and 5xx (the SDK's list), honouring Retry-After up to a cap.
#[derive(Debug)]
struct ArmRetry {
    max_attempts: u32,
    initial: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
}

#[async_trait::async_trait]
impl azure_core::RetryPolicy for ArmRetry {
    fn is_expired(&self, _elapsed: Duration, retry_count: u32) -> bool {
        retry_count.saturating_add(1) >= self.max_attempts
    }

    fn sleep_duration(&self, retry_count: u32) -> Duration {
        // retry_count is 1 before the first retry; past 40 doublings every delay has reached its cap.
        ExponentialBuilder::new()
            .with_min_delay(self.initial)
            .with_max_delay(self.max_delay)
            .with_factor(2.0)
            .without_max_times()
            .build()
            .nth(retry_count.saturating_sub(1).min(40) as usize)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    async fn wait(&self, _error: &azure_core::Error, retry_count: u32, retry_after: Option<Duration>) {
        let pause = match retry_after {
            Some(after) => after.min(self.max_retry_after),
            None => self.sleep_duration(retry_count),
        };
        tokio::time::sleep(pause).await;
    }
}

/// The SDK clients of one endpoint and credential, and a pipeline for polling operation URLs.
#[derive(Clone)]
struct Clients {
    compute: azure_mgmt_compute::Client,
    network: azure_mgmt_network::Client,
    credential: Arc<dyn TokenCredential>,
    scopes: Vec<String>,
    pipeline: Pipeline,
    arm: Url,
}

impl Clients {
    fn new(
        endpoints: &Endpoints,
        creds: &Credentials,
        token: Option<String>,
        settings: &AzureSettings,
    ) -> Result<Clients, DriverError> {
        let url = |what: &str, u: &str| {
            Url::parse(u).map_err(|e| DriverError::new(Code::InvalidArgument, format!("{what} {u:?}: {e}")))
        };
        let arm = url("ARM endpoint", &endpoints.arm)?;
        let authority = url("authority", &endpoints.authority)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(settings.request_timeout)
            .build()
            .map_err(|e| DriverError::new(Code::Internal, format!("building the HTTP client: {e}")))?;
        let http: Arc<dyn azure_core::HttpClient> = Arc::new(http);
        let tenant = creds.tenant_id.expose().to_string();
        let client_id = creds.client_id.expose().to_string();
        let credential: Arc<dyn TokenCredential> = match (&creds.credential, token) {
            (Credential::ClientSecret(secret), _) => Arc::new(azure_identity::ClientSecretCredential::new(
                http.clone(),
                authority,
                tenant,
                client_id,
                secret.expose().to_string(),
            )),
            (Credential::WorkloadIdentity(_), token) => Arc::new(azure_identity::WorkloadIdentityCredential::new(
                http.clone(),
                authority,
                tenant,
                client_id,
                token.unwrap_or_default().trim().to_string(),
            )),
        };
        let scope = arm
            .join(".default")
            .map_err(|e| DriverError::new(Code::InvalidArgument, format!("ARM endpoint: {e}")))?
            .to_string();
        let retry = Arc::new(ArmRetry {
            max_attempts: settings.max_attempts.max(1),
            initial: settings.initial_backoff,
            max_delay: settings.max_retry_delay,
            max_retry_after: settings.max_retry_after,
        });
        let options = ClientOptions::default()
            .retry(RetryOptions::custom(retry.clone()))
            .transport(TransportOptions::new(http.clone()));
        let build_error =
            |e: azure_core::Error| DriverError::new(Code::Internal, format!("building the ARM client: {:?}", e.kind()));
        let compute = azure_mgmt_compute::Client::builder(credential.clone())
            .endpoint(arm.clone())
            .scopes(&[scope.as_str()])
            .retry(RetryOptions::custom(retry.clone()))
            .transport(TransportOptions::new(http.clone()))
            .build()
            .map_err(build_error)?;
        let network = azure_mgmt_network::Client::builder(credential.clone())
            .endpoint(arm.clone())
            .scopes(&[scope.as_str()])
            .retry(RetryOptions::custom(retry))
            .transport(TransportOptions::new(http))
            .build()
            .map_err(build_error)?;
        let pipeline = Pipeline::new(Some("mcm"), Some(env!("CARGO_PKG_VERSION")), options, Vec::new(), Vec::new());
        Ok(Clients { compute, network, credential, scopes: vec![scope], pipeline, arm })
    }
}

/// What a resource looks like to the driver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Resource {
    name: String,
    tags: BTreeMap<String, String>,
    provisioning_state: String,
    /// A NIC's first private IP.
    private_ip: Option<String>,
    /// A disk's `managedBy`: the VM it is attached to.
    managed_by: Option<String>,
    /// A VM's NICs and disks, by name (from its network and storage profiles).
    attached: request::Attached,
}

impl Resource {
    fn from_json(value: &Value) -> Resource {
        let tags = value["tags"]
            .as_object()
            .map(|t| t.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
            .unwrap_or_default();
        Resource {
            name: value["name"].as_str().unwrap_or_default().to_string(),
            tags,
            provisioning_state: value["properties"]["provisioningState"].as_str().unwrap_or_default().to_string(),
            private_ip: value["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
                .as_str()
                .map(str::to_string),
            managed_by: value["managedBy"].as_str().filter(|m| !m.is_empty()).map(str::to_string),
            attached: request::attached(value),
        }
    }

    fn from_tags(name: Option<&String>, tags: Option<&Value>) -> Resource {
        let mut value = serde_json::json!({"name": name});
        if let Some(tags) = tags {
            value["tags"] = tags.clone();
        }
        Resource::from_json(&value)
    }
}

/// One request's view of ARM: clients, the parsed spec, the subscription and the secret (to scrub error text).
struct Arm<'a> {
    clients: Clients,
    spec: ProviderSpec,
    subscription: String,
    secret: SecretData,
    settings: &'a AzureSettings,
}

/// The kind of resource a call is about (names in messages, and which client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Vm,
    Nic,
    Disk,
}

impl Kind {
    fn path(self) -> &'static str {
        match self {
            Kind::Vm => "virtualMachines",
            Kind::Nic => "networkInterfaces",
            Kind::Disk => "disks",
        }
    }
}

impl Arm<'_> {
    fn fail(&self, operation: &str, err: &azure_core::Error) -> DriverError {
        Failure::of(err).into_driver_error(operation, &self.secret)
    }

    fn rg(&self) -> &str {
        &self.spec.resource_group
    }

    fn provider_id(&self, vm: &str) -> String {
        request::provider_id(&self.subscription, self.rg(), vm)
    }

    /// GET a resource; `None` when ARM says 404.
    async fn get(&self, kind: Kind, name: &str) -> Result<Option<Resource>, DriverError> {
        let (rg, sub) = (self.rg().to_string(), self.subscription.clone());
        let sent = match kind {
            Kind::Vm => self
                .clients
                .compute
                .virtual_machines_client()
                .get(rg, name, sub)
                .send()
                .await
                .map(|r| r.into_raw_response()),
            Kind::Nic => self
                .clients
                .network
                .network_interfaces_client()
                .get(rg, name, sub)
                .send()
                .await
                .map(|r| r.into_raw_response()),
            Kind::Disk => {
                self.clients.compute.disks_client().get(sub, rg, name).send().await.map(|r| r.into_raw_response())
            }
        };
        let operation = format!("GET {}/{name}", kind.path());
        match sent {
            Ok(response) => Ok(Some(Resource::from_json(&self.json(&operation, response).await?))),
            Err(e) if Failure::of(&e).is_not_found() => Ok(None),
            Err(e) => Err(self.fail(&operation, &e)),
        }
    }

    async fn json(&self, operation: &str, response: azure_core::Response) -> Result<Value, DriverError> {
        let bytes = response.into_body().collect().await.map_err(|e| self.fail(operation, &e))?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            DriverError::new(Code::Internal, format!("ARM {operation}: unreadable answer: {:?}", e.classify()))
        })
    }

    /// PUT the machine's NIC and wait for it.
    async fn put_nic(&self, nic: &str) -> Result<Resource, DriverError> {
        let operation = format!("PUT networkInterfaces/{nic}");
        let body: azure_mgmt_network::models::NetworkInterface =
            serde_json::from_value(request::nic_body(&self.spec, &self.subscription, nic))
                .map_err(|e| DriverError::new(Code::Internal, format!("{operation}: {e}")))?;
        let response = self
            .clients
            .network
            .network_interfaces_client()
            .create_or_update(self.rg(), nic, body, &self.subscription)
            .send()
            .await
            .map_err(|e| self.fail(&operation, &e))?
            .into_raw_response();
        self.settle(&operation, response).await?;
        self.get(Kind::Nic, nic).await?.ok_or_else(|| {
            DriverError::new(Code::Internal, format!("ARM {operation}: the NIC is not there after its creation"))
        })
    }

    /// PUT the VM and wait for it (bounded).
    async fn put_vm(&self, vm: &str, custom_data: &str, ssh_key: &str) -> Result<(), DriverError> {
        let operation = format!("PUT virtualMachines/{vm}");
        let body = request::vm_body(&self.spec, &self.subscription, vm, custom_data, ssh_key);
        // Sent as JSON, not through the SDK's VirtualMachine model: that model drops the entries of
        // identity.userAssignedIdentities and adds "timeCreated": null. Same URL and api-version as the SDK's.
        let mut url = self.clients.arm.clone();
        url.set_path(&request::vm_id(&self.subscription, self.rg(), vm));
        url.query_pairs_mut().append_pair("api-version", VM_API_VERSION);
        // An error never quotes the body (it holds the custom data).
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| DriverError::new(Code::Internal, format!("ARM {operation}: {:?}", e.classify())))?;
        let mut req = Request::new(url, Method::Put);
        req.insert_header(AUTHORIZATION, format!("Bearer {}", self.token(&operation).await?));
        req.insert_header("content-type", "application/json");
        req.set_body(bytes);
        let response =
            self.clients.pipeline.send(&Context::new(), &mut req).await.map_err(|e| self.fail(&operation, &e))?;
        self.settle(&operation, response).await
    }

    /// DELETE a resource (absent counts as deleted) and wait for it.
    async fn delete(&self, kind: Kind, name: &str) -> Result<(), DriverError> {
        let operation = format!("DELETE {}/{name}", kind.path());
        let (rg, sub) = (self.rg().to_string(), self.subscription.clone());
        let sent = match kind {
            Kind::Vm => self
                .clients
                .compute
                .virtual_machines_client()
                .delete(rg, name, sub)
                .send()
                .await
                .map(|r| r.into_raw_response()),
            Kind::Nic => self
                .clients
                .network
                .network_interfaces_client()
                .delete(rg, name, sub)
                .send()
                .await
                .map(|r| r.into_raw_response()),
            Kind::Disk => {
                self.clients.compute.disks_client().delete(sub, rg, name).send().await.map(|r| r.into_raw_response())
            }
        };
        match sent {
            Ok(response) => self.settle(&operation, response).await,
            Err(e) if Failure::of(&e).is_not_found() => Ok(()),
            Err(e) => Err(self.fail(&operation, &e)),
        }
    }

    /// Waits for the long-running operation a PUT or DELETE started: polls `Azure-AsyncOperation` (or, for a 202
    /// without it, `Location`) with back-off (Retry-After when ARM gives one, capped), until it ends or
    /// `operation_timeout` passes (`DeadlineExceeded`). A failed operation maps its ARM error code.
    async fn settle(&self, operation: &str, response: azure_core::Response) -> Result<(), DriverError> {
        let status = u16::from(response.status());
        let headers = response.headers();
        let async_url = headers.get_optional_string(&AZURE_ASYNCOPERATION);
        let location = headers.get_optional_string(&LOCATION).filter(|_| status == 202);
        let mut retry_after = retry_after_header(headers);
        let (url, by_status) = match (async_url, location) {
            (Some(url), _) => (url, false),
            (None, Some(url)) => (url, true),
            // Done at once (200/201/204), or an answer without anything to poll: later calls see the state.
            (None, None) => return Ok(()),
        };
        let url = self.same_origin(operation, &url)?;
        let deadline = tokio::time::Instant::now() + self.settings.operation_timeout;
        // Doubling pauses from first_poll to max_poll, with jitter so many machines do not poll in step.
        let mut pauses = ExponentialBuilder::new()
            .with_min_delay(self.settings.first_poll)
            .with_max_delay(self.settings.max_poll)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build();
        loop {
            let pause = pauses.next().unwrap_or(self.settings.max_poll).min(self.settings.max_poll);
            let wait = retry_after.map_or(pause, |after| after.min(self.settings.max_poll));
            if tokio::time::Instant::now() + wait > deadline {
                return Err(DriverError::new(
                    Code::DeadlineExceeded,
                    format!(
                        "ARM {operation}: still running after {:?}; a retried call picks it up where it is",
                        self.settings.operation_timeout
                    ),
                ));
            }
            tokio::time::sleep(wait).await;
            let polled = self.poll(operation, &url).await?;
            retry_after = retry_after_header(&polled.1);
            let (code, body) = (polled.0, polled.2);
            if by_status {
                if code != 202 {
                    return Ok(());
                }
                continue;
            }
            match body["status"].as_str().unwrap_or_default() {
                "Succeeded" => return Ok(()),
                "Failed" | "Canceled" => {
                    let error = &body["error"];
                    let failure = Failure::Service {
                        status: None,
                        code: error["code"].as_str().unwrap_or("OperationFailed").to_string(),
                        message: error["message"].as_str().unwrap_or_default().to_string(),
                    };
                    return Err(failure.into_driver_error(operation, &self.secret));
                }
                _ => {}
            }
        }
    }

    /// Operation URLs must point at the ARM endpoint: the bearer token goes nowhere else.
    fn same_origin(&self, operation: &str, url: &str) -> Result<Url, DriverError> {
        let parsed = Url::parse(url).ok().filter(|u| u.origin() == self.clients.arm.origin());
        parsed.ok_or_else(|| {
            DriverError::new(
                Code::Internal,
                format!("ARM {operation}: the operation URL is not on the ARM endpoint; not polled"),
            )
        })
    }

    /// A bearer token for ARM (cached by the credential until shortly before it expires).
    async fn token(&self, operation: &str) -> Result<String, DriverError> {
        let scopes: Vec<&str> = self.clients.scopes.iter().map(String::as_str).collect();
        let token = self.clients.credential.get_token(&scopes).await.map_err(|e| self.fail(operation, &e))?;
        Ok(token.token.secret().to_string())
    }

    /// One poll of an operation URL: (status, headers, JSON body).
    async fn poll(
        &self,
        operation: &str,
        url: &Url,
    ) -> Result<(u16, azure_core::headers::Headers, Value), DriverError> {
        let mut req = Request::new(url.clone(), Method::Get);
        req.insert_header(AUTHORIZATION, format!("Bearer {}", self.token(operation).await?));
        let response = self
            .clients
            .pipeline
            .send(&Context::new(), &mut req)
            .await
            .map_err(|e| self.fail(&format!("{operation} (polling)"), &e))?;
        let status = u16::from(response.status());
        let headers = response.headers().clone();
        let body = self.json(operation, response).await?;
        Ok((status, headers, body))
    }

    /// Every resource of a kind in the resource group (all pages).
    async fn list(&self, kind: Kind) -> Result<Vec<Resource>, DriverError> {
        let operation = format!("LIST {}", kind.path());
        let (rg, sub) = (self.rg().to_string(), self.subscription.clone());
        let mut out = Vec::new();
        match kind {
            Kind::Vm => {
                let mut pages = self.clients.compute.virtual_machines_client().list(rg, sub).into_stream();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|e| self.fail(&operation, &e))?;
                    out.extend(
                        page.value
                            .iter()
                            .map(|v| Resource::from_tags(v.resource.name.as_ref(), v.resource.tags.as_ref())),
                    );
                }
            }
            Kind::Nic => {
                let mut pages = self.clients.network.network_interfaces_client().list(rg, sub).into_stream();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|e| self.fail(&operation, &e))?;
                    out.extend(
                        page.value
                            .iter()
                            .map(|v| Resource::from_tags(v.resource.name.as_ref(), v.resource.tags.as_ref())),
                    );
                }
            }
            Kind::Disk => {
                let mut pages = self.clients.compute.disks_client().list_by_resource_group(sub, rg).into_stream();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|e| self.fail(&operation, &e))?;
                    out.extend(
                        page.value
                            .iter()
                            .map(|v| Resource::from_tags(v.resource.name.as_ref(), v.resource.tags.as_ref())),
                    );
                }
            }
        }
        Ok(out)
    }

    /// The machine's VM, if it exists and is this class's cluster and role; a VM of that name without the tags is
    /// `AlreadyExists` (someone else's: left alone).
    async fn owned_vm(&self, vm: &str) -> Result<Option<Resource>, DriverError> {
        match self.get(Kind::Vm, vm).await? {
            Some(found) if request::owned(&found.tags, &self.spec) => Ok(Some(found)),
            Some(_) => Err(DriverError::new(
                Code::AlreadyExists,
                format!(
                    "VM {vm} in resource group {} does not carry the tag keys {} and {}; left alone",
                    self.rg(),
                    self.spec.cluster_tag,
                    self.spec.role_tag
                ),
            )),
            None => Ok(None),
        }
    }

    /// Deletes the machine's NIC and disks that still exist (each idempotent): those `attached` to its VM (read
    /// before the VM went), and those named after the machine that are ours by [`request::leftover_is_ours`].
    async fn delete_leftovers(&self, vm: &str, attached: &request::Attached) -> Result<(), DriverError> {
        let mut names: Vec<(Kind, String, bool)> = vec![(Kind::Nic, request::nic_name(vm), false)];
        names.extend(request::disk_names(&self.spec, vm).into_iter().map(|d| (Kind::Disk, d, false)));
        for nic in &attached.nics {
            match names.iter_mut().find(|(k, n, _)| *k == Kind::Nic && n.eq_ignore_ascii_case(nic)) {
                Some(entry) => entry.2 = true,
                None => names.push((Kind::Nic, nic.clone(), true)),
            }
        }
        for disk in &attached.disks {
            match names.iter_mut().find(|(k, n, _)| *k == Kind::Disk && n.eq_ignore_ascii_case(disk)) {
                Some(entry) => entry.2 = true,
                None => names.push((Kind::Disk, disk.clone(), true)),
            }
        }
        for (kind, name, was_attached) in names {
            let Some(found) = self.get(kind, &name).await? else { continue };
            let disk = kind == Kind::Disk;
            if was_attached || request::leftover_is_ours(disk, &found.tags, found.managed_by.as_deref(), &self.spec) {
                self.delete(kind, &name).await?;
                tracing::info!(vm, resource = %name, kind = kind.path(), "delete: removed a leftover");
            } else {
                tracing::info!(vm, resource = %name, kind = kind.path(), "delete: not this cluster's; left alone");
            }
        }
        Ok(())
    }

    fn addresses(&self, vm: &str, nic: Option<&Resource>) -> Vec<NodeAddress> {
        let mut out = Vec::new();
        if let Some(ip) = nic.and_then(|n| n.private_ip.clone()) {
            out.push(NodeAddress { type_: "InternalIP".into(), address: ip });
        }
        out.push(NodeAddress { type_: "Hostname".into(), address: vm.to_string() });
        out
    }
}

fn retry_after_header(headers: &azure_core::headers::Headers) -> Option<Duration> {
    headers.get_optional_str(&RETRY_AFTER).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs)
}

#[async_trait::async_trait]
impl Driver for AzureDriver {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capacity_of(&self, provider_spec: &serde_json::Value) -> Option<crate::providers::NodeCapacity> {
        super::sizes::capacity_of(provider_spec)
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        let (arm, vm) = self.prepare_machine(request)?;
        let custom_data = credentials::custom_data(&request.secret)?;
        let answer = |nic: Option<&Resource>| CreateMachineResponse {
            provider_id: arm.provider_id(&vm),
            node_name: vm.clone(),
            last_known_state: None,
            addresses: arm.addresses(&vm, nic),
        };
        // A VM of this machine exists (a retried create after a crash or a timeout): answer it, unless its
        // provisioning failed, when the PUT below retries it (ARM re-runs a PUT on a failed VM).
        if let Some(found) = arm.owned_vm(&vm).await? {
            if !found.provisioning_state.eq_ignore_ascii_case("Failed") {
                tracing::info!(vm = %vm, state = %found.provisioning_state, "create: VM exists");
                return Ok(answer(None));
            }
            tracing::info!(vm = %vm, "create: VM exists in state Failed; provisioning it again");
        }
        let nic_name = request::nic_name(&vm);
        let nic = match arm.get(Kind::Nic, &nic_name).await? {
            Some(nic) if !request::owned(&nic.tags, &arm.spec) => {
                return Err(DriverError::new(
                    Code::AlreadyExists,
                    format!(
                        "NIC {nic_name} in resource group {} does not carry the tag keys {} and {}; left alone",
                        arm.rg(),
                        arm.spec.cluster_tag,
                        arm.spec.role_tag
                    ),
                ));
            }
            Some(nic) if nic.provisioning_state.eq_ignore_ascii_case("Succeeded") => nic,
            _ => {
                let nic = arm.put_nic(&nic_name).await?;
                tracing::info!(vm = %vm, nic = %nic_name, "create: NIC created");
                nic
            }
        };
        let ssh_key = match &arm.spec.ssh_key.key_data {
            Some(key) => key.clone(),
            None => {
                let mut random = [0u8; 256];
                rand::Rng::fill(&mut rand::rng(), &mut random[..]);
                request::dummy_ssh_key(&random)
            }
        };
        match arm.put_vm(&vm, custom_data.expose(), &ssh_key).await {
            Ok(()) => {}
            Err(e) if e.code == Code::ResourceExhausted => {
                // Out of capacity or quota: remove what this attempt made, so the pool backs off with nothing left.
                tracing::info!(vm = %vm, "create: no capacity; removing the VM, NIC and disks again");
                let attached = match arm.get(Kind::Vm, &vm).await {
                    Ok(Some(found)) => found.attached,
                    _ => request::Attached::default(),
                };
                if let Err(cleanup) = arm.delete(Kind::Vm, &vm).await {
                    tracing::info!(vm = %vm, error = %cleanup, "create: removing the VM failed; delete retries");
                } else if let Err(cleanup) = arm.delete_leftovers(&vm, &attached).await {
                    tracing::info!(vm = %vm, error = %cleanup, "create: removing NIC/disks failed; delete retries");
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        tracing::info!(vm = %vm, resource_group = %arm.rg(), "create: VM created");
        Ok(answer(Some(&nic)))
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        spec_of(&request.class)?;
        Err(DriverError::new(Code::Unimplemented, "the Azure driver has nothing to initialize"))
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        let (arm, vm) = self.prepare_deletion(request)?;
        let attached = match arm.get(Kind::Vm, &vm).await? {
            // Never delete what is not this cluster's, whatever the name says.
            Some(found) if !request::owned(&found.tags, &arm.spec) => {
                return Err(DriverError::new(
                    Code::NotFound,
                    format!(
                        "VM {vm} does not carry the tag keys {} and {}; left alone",
                        arm.spec.cluster_tag, arm.spec.role_tag
                    ),
                ));
            }
            Some(found) => {
                arm.delete(Kind::Vm, &vm).await?;
                tracing::info!(vm = %vm, resource_group = %arm.rg(), "delete: VM deleted");
                found.attached
            }
            None => request::Attached::default(),
        };
        // A VM made with deleteOption Delete takes its NIC and disks along; others (older drivers, a crash between
        // NIC and VM) leave them, and they go here.
        arm.delete_leftovers(&vm, &attached).await?;
        Ok(DeleteMachineResponse { last_known_state: None })
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        let (arm, vm) = self.prepare_machine(request)?;
        match arm.get(Kind::Vm, &vm).await? {
            Some(found) if request::owned(&found.tags, &arm.spec) => Ok(MachineStatusResponse {
                provider_id: arm.provider_id(&vm),
                node_name: vm.clone(),
                addresses: arm.addresses(&vm, None),
            }),
            Some(_) => Err(DriverError::new(
                Code::NotFound,
                format!("VM {vm} does not carry the tag keys {} and {}", arm.spec.cluster_tag, arm.spec.role_tag),
            )),
            None => Err(DriverError::new(Code::NotFound, format!("no VM {vm} in resource group {}", arm.rg()))),
        }
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        let arm = self.prepare(&request.class, &request.secret)?;
        let owned = |resources: Vec<Resource>| -> Vec<String> {
            resources.into_iter().filter(|r| request::owned(&r.tags, &arm.spec)).map(|r| r.name).collect()
        };
        let vms = owned(arm.list(Kind::Vm).await?);
        let nics = owned(arm.list(Kind::Nic).await?);
        let disks = owned(arm.list(Kind::Disk).await?);
        Ok(request::machine_names(&arm.spec, &vms, &nics, &disks)
            .into_iter()
            .map(|name| (arm.provider_id(&name), name))
            .collect())
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        Ok(request::volume_ids(&request.pv_specs))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::providers::MachineInfo;
    use crate::providers::azure::spec::tests::minimal;

    fn secret() -> SecretData {
        SecretData(
            [
                ("clientID".to_string(), b"unit-client-id".to_vec()),
                ("clientSecret".to_string(), b"unit-client-secret".to_vec()),
                ("tenantID".to_string(), b"unit-tenant".to_vec()),
                ("subscriptionID".to_string(), b"unit-subscription".to_vec()),
                ("userData".to_string(), b"#cloud-config unit-user-data".to_vec()),
            ]
            .into(),
        )
    }

    fn request(class: ClassInfo, secret: SecretData) -> MachineRequest {
        MachineRequest {
            machine: MachineInfo { name: "m1".into(), namespace: "default".into(), ..Default::default() },
            class,
            secret,
            last_known_state: None,
        }
    }

    fn class(spec: Value) -> ClassInfo {
        ClassInfo { name: "c".into(), provider: PROVIDER.into(), provider_spec: spec, node_template: None }
    }

    #[test]
    fn debug_shows_no_credentials() {
        let driver = AzureDriver::with_endpoints("http://127.0.0.1:1/", "http://127.0.0.1:1/");
        let r = request(class(minimal()), secret());
        let shown = format!("{driver:?} {r:?} {:?}", Credentials::from_secret(&r.secret).unwrap());
        for (_, value) in r.secret.0.iter() {
            assert!(!shown.contains(String::from_utf8_lossy(value).as_ref()), "{shown}");
        }
    }

    #[tokio::test]
    async fn requests_fail_before_any_call_when_the_class_or_secret_is_wrong() {
        let driver = AzureDriver::with_endpoints("http://127.0.0.1:9/", "http://127.0.0.1:9/");
        let mut wrong = class(minimal());
        wrong.provider = "AWS".into();
        let mut bad_spec = minimal();
        bad_spec["location"] = json!(7);
        let mut no_keys = secret();
        no_keys.0.remove("clientSecret");
        let mut no_user_data = secret();
        no_user_data.0.remove("userData");
        let cases = [
            ("provider", request(wrong, secret()), "has provider \"AWS\", this driver serves \"Azure\""),
            ("spec", request(class(bad_spec), secret()), "providerSpec.location: must be a string"),
            ("keys", request(class(minimal()), no_keys), "secret: needs clientSecret"),
            ("user data", request(class(minimal()), no_user_data), "secret: needs userData"),
        ];
        for (name, r, want) in cases {
            let err = driver.create_machine(&r).await.unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{name}: {err}");
            assert!(err.message.contains(want), "{name}: {err}");
        }
        let mut unnamed = request(class(minimal()), secret());
        unnamed.machine.name.clear();
        assert_eq!(driver.get_machine_status(&unnamed).await.unwrap_err().code, Code::InvalidArgument);
        let mut bad_id = request(class(minimal()), secret());
        bad_id.machine.provider_id = Some("aws:///x/i-1".into());
        assert_eq!(driver.delete_machine(&bad_id).await.unwrap_err().code, Code::InvalidArgument);
        let err = driver.initialize_machine(&request(class(minimal()), secret())).await.unwrap_err();
        assert_eq!(err.code, Code::Unimplemented);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_unavailable_and_shows_no_secret() {
        let settings =
            AzureSettings { max_attempts: 2, initial_backoff: Duration::from_millis(1), ..Default::default() };
        let driver = AzureDriver::with_endpoints("http://127.0.0.1:9/", "http://127.0.0.1:9/").with_settings(settings);
        let err = driver.get_machine_status(&request(class(minimal()), secret())).await.unwrap_err();
        // The token is fetched first, from the same unreachable place.
        assert!(matches!(err.code, Code::Unauthenticated | Code::Unavailable), "{err}");
        let shown = format!("{err} {err:?}");
        for value in ["unit-client-id", "unit-client-secret", "unit-user-data", "unit-tenant"] {
            assert!(!shown.contains(value), "{shown}");
        }
    }

    #[test]
    fn cache_keys_differ_by_everything_and_hide_the_keys() {
        let creds = Credentials::from_secret(&secret()).unwrap();
        let e = Endpoints { arm: "a".into(), authority: "b".into() };
        let a = cache_key(&e, &creds, None);
        assert_ne!(a, cache_key(&Endpoints { arm: "x".into(), authority: "b".into() }, &creds, None));
        let mut other = secret();
        other.0.insert("clientSecret".into(), b"rotated".to_vec());
        assert_ne!(a, cache_key(&e, &Credentials::from_secret(&other).unwrap(), None));
        assert!(!a.contains("unit"));
    }

    #[tokio::test]
    async fn retries_honour_retry_after_up_to_the_cap() {
        use azure_core::RetryPolicy;
        let policy = ArmRetry {
            max_attempts: 3,
            initial: Duration::from_millis(1),
            max_delay: Duration::from_millis(4),
            max_retry_after: Duration::from_millis(20),
        };
        assert!(!policy.is_expired(Duration::ZERO, 0) && !policy.is_expired(Duration::ZERO, 1));
        assert!(policy.is_expired(Duration::ZERO, 2));
        assert_eq!(policy.sleep_duration(1), Duration::from_millis(1));
        assert_eq!(policy.sleep_duration(3), Duration::from_millis(4));
        assert_eq!(policy.sleep_duration(30), Duration::from_millis(4));
    }
}
