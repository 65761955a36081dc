//! [`GcpDriver`]: the [`Driver`] contract over Compute Engine (google-cloud-compute-v1).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use google_cloud_auth::credentials::{self as auth, anonymous, external_account, service_account};
use google_cloud_compute_v1::client::Instances;
use google_cloud_compute_v1::model::Instance;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicy, RetryPolicyExt};
use google_cloud_gax::retry_result::RetryResult;
use google_cloud_gax::retry_state::RetryState;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::credentials::{self, Account, Credentials};
use super::errors::Failure;
use super::request::{self, InstanceRef};
use super::spec::{self, ProviderSpec};
use crate::providers::secrets::scrub;
use crate::providers::{
    ClassInfo, Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse, SecretData,
};

/// The `MachineClass.provider` value the GCP driver serves.
pub const PROVIDER: &str = "GCP";

/// Clients are cached per endpoint and credentials; past this many the cache starts afresh.
const MAX_CACHED_CLIENTS: usize = 64;

/// Instances per page of `instances.list`.
const PAGE_SIZE: u32 = 500;

/// Tunables; the defaults suit Compute Engine, tests shorten them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcpSettings {
    /// How long create and delete wait for their zone operation to finish.
    pub operation_timeout: Duration,
    /// The first pause between operation polls; it doubles up to [`Self::operation_max_poll`].
    pub operation_first_poll: Duration,
    /// The longest pause between operation polls.
    pub operation_max_poll: Duration,
    /// Attempts per Compute call (retried: 429, 503 and I/O errors; GET and DELETE also other transient ones).
    pub max_attempts: u32,
    /// The first retry back-off; it doubles up to 30 s.
    pub initial_backoff: Duration,
    /// Time limit of one attempt of a Compute call.
    pub attempt_timeout: Duration,
}

impl Default for GcpSettings {
    fn default() -> Self {
        GcpSettings {
            operation_timeout: Duration::from_secs(300),
            operation_first_poll: Duration::from_secs(1),
            operation_max_poll: Duration::from_secs(10),
            max_attempts: 5,
            initial_backoff: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(60),
        }
    }
}

/// The GCP Compute Engine driver (provider `GCP`), compatible with Gardener's GCP MachineClasses; see
/// `docs/providers/gcp.md`.
///
/// Credentials, project, zone and endpoint come with each request (class secret and providerSpec), so one driver
/// serves every class. `Debug` shows no credentials.
pub struct GcpDriver {
    endpoint: Option<String>,
    anonymous: bool,
    settings: GcpSettings,
    clients: Mutex<HashMap<String, Instances>>,
}

impl fmt::Debug for GcpDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = self.clients.lock().map(|c| c.len()).unwrap_or_default();
        f.debug_struct("GcpDriver")
            .field("endpoint", &self.endpoint)
            .field("anonymous", &self.anonymous)
            .field("settings", &self.settings)
            .field("cached_clients", &cached)
            .finish()
    }
}

impl Default for GcpDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl GcpDriver {
    /// A driver for Google's Compute endpoint (or a class secret's `endpoint`).
    pub fn new() -> Self {
        GcpDriver {
            endpoint: None,
            anonymous: false,
            settings: GcpSettings::default(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// A driver for another Compute endpoint (a local fake in tests, a private endpoint); a class secret's
    /// `endpoint` still wins. Requests go to `<endpoint>/compute/v1/projects/...`.
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        GcpDriver { endpoint: Some(endpoint.into()), ..Self::new() }
    }

    /// **Tests only**: the same driver sending no credentials at all (no `Authorization` header); the project
    /// comes from the secret's `projectID` (or a key's `project_id`). Never use this against Google.
    pub fn with_anonymous_credentials(mut self) -> Self {
        self.anonymous = true;
        self
    }

    /// The same driver with other tunables.
    pub fn with_settings(mut self, settings: GcpSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The tunables in use.
    pub fn settings(&self) -> &GcpSettings {
        &self.settings
    }

    /// A client and the project for the request's secret.
    async fn client(&self, secret: &SecretData) -> Result<(Instances, String), DriverError> {
        let endpoint = credentials::endpoint(secret, self.endpoint.as_deref())?;
        let (project, account) = if self.anonymous {
            (credentials::project_only(secret)?, None)
        } else {
            let account = Account::from_secret(secret)?;
            (account.project.clone(), Some(account))
        };
        let key = cache_key(endpoint.as_deref(), account.as_ref().map(|a| &a.credentials));
        if let Some(client) = self.clients.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok((client, project));
        }
        let creds = match &account {
            None => anonymous::Builder::new().build(),
            Some(account) => build_credentials(&account.credentials, secret)?,
        };
        let s = &self.settings;
        let backoff = ExponentialBackoffBuilder::new()
            .with_initial_delay(s.initial_backoff)
            .with_maximum_delay(Duration::from_secs(30).max(s.initial_backoff))
            .build()
            .map_err(|e| DriverError::new(Code::Internal, format!("GCP client back-off: {e}")))?;
        let mut builder = Instances::builder()
            .with_credentials(creds)
            .with_retry_policy(RetryThrottled.with_attempt_limit(s.max_attempts.max(1)))
            .with_backoff_policy(backoff)
            .with_attempt_timeout(s.attempt_timeout);
        if let Some(url) = &endpoint {
            builder = builder.with_endpoint(url);
        }
        let client = builder.build().await.map_err(|e| {
            DriverError::new(Code::Internal, scrub(&format!("cannot set up the Compute client: {e}"), secret))
        })?;
        if let Ok(mut clients) = self.clients.lock() {
            if clients.len() >= MAX_CACHED_CLIENTS {
                clients.clear();
            }
            clients.insert(key, client.clone());
        }
        Ok((client, project))
    }

    /// The parsed spec, a client and the project, for a class that must be ours.
    async fn prepare(&self, class: &ClassInfo, secret: &SecretData) -> Result<Compute<'_>, DriverError> {
        let spec = spec_of(class)?;
        let (client, project) = self.client(secret).await?;
        Ok(Compute { client, project, spec, secret: secret.clone(), settings: &self.settings })
    }

    /// As [`Self::prepare`], for a request that must name its machine with a valid instance name.
    async fn prepare_machine(&self, request: &MachineRequest) -> Result<Compute<'_>, DriverError> {
        let spec = spec_of(&request.class)?;
        let name = &request.machine.name;
        if name.is_empty() {
            return Err(DriverError::new(Code::InvalidArgument, "the machine has no name"));
        }
        if !spec::is_instance_name(name) {
            return Err(DriverError::new(
                Code::InvalidArgument,
                format!(
                    "machine name {name:?} cannot be a Compute Engine instance name (1-63 lowercase letters, digits \
                     and '-', starting with a letter)"
                ),
            ));
        }
        let (client, project) = self.client(&request.secret).await?;
        Ok(Compute { client, project, spec, secret: request.secret.clone(), settings: &self.settings })
    }
}

/// Credentials from the secret's JSON; errors name the key, never its content.
fn build_credentials(creds: &Credentials, secret: &SecretData) -> Result<auth::Credentials, DriverError> {
    let json = creds.json()?;
    let built = match creds {
        Credentials::ServiceAccount(_) => service_account::Builder::new(json).build(),
        Credentials::ExternalAccount(_) => external_account::Builder::new(json).build(),
    };
    built.map_err(|e| {
        DriverError::new(
            Code::InvalidArgument,
            scrub(&format!("secret: the credentials cannot be used: {}", first_line(&e.to_string())), secret),
        )
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Retries what [`Aip194Strict`] retries (I/O errors; other transient errors only for idempotent calls), and 429s
/// and 503s of any call: Compute's error bodies are not `google.rpc.Status`, so the strict policy does not see
/// them as UNAVAILABLE. Repeating an insert is safe: the instance name is unique in the zone, a second insert that
/// finds it answers 409, which the driver takes as created.
#[derive(Clone, Debug)]
struct RetryThrottled;

impl RetryPolicy for RetryThrottled {
    fn on_error(&self, state: &RetryState, error: GaxError) -> RetryResult {
        if matches!(error.http_status_code(), Some(429 | 503)) {
            return RetryResult::Continue(error);
        }
        Aip194Strict.on_error(state, error)
    }
}

/// A hash naming one client configuration (never the credentials themselves).
fn cache_key(endpoint: Option<&str>, creds: Option<&Credentials>) -> String {
    let mut h = Sha256::new();
    h.update(endpoint.unwrap_or("").as_bytes());
    h.update([0]);
    match creds {
        None => h.update(b"anonymous"),
        Some(Credentials::ServiceAccount(json)) => {
            h.update(b"service-account\0");
            h.update(json.expose().as_bytes());
        }
        Some(Credentials::ExternalAccount(json)) => {
            h.update(b"external-account\0");
            h.update(json.expose().as_bytes());
        }
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

/// The pauses between polls of a zone operation: doubling from the first poll up to the longest pause, ending
/// once they add up to the operation timeout.
fn operation_backoff(settings: &GcpSettings) -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(settings.operation_first_poll)
        .with_max_delay(settings.operation_max_poll.max(settings.operation_first_poll))
        .with_factor(2.0)
        .without_max_times()
        .with_total_delay(Some(settings.operation_timeout))
        .build()
}

/// A model value as JSON (the API's own field names), to read with pointers.
fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// One request's view of Compute Engine: a client, the project, the parsed spec, and the secret (to scrub error
/// text).
struct Compute<'a> {
    client: Instances,
    project: String,
    spec: ProviderSpec,
    secret: SecretData,
    settings: &'a GcpSettings,
}

impl Compute<'_> {
    fn fail(&self, operation: &str, err: &GaxError) -> DriverError {
        Failure::of(err).into_driver_error(operation, &self.secret)
    }

    /// Where the machine's instance is: its providerID's project, zone and name, else the class's zone and the
    /// machine name in the secret's project.
    fn locate(&self, name: &str, provider_id: Option<&str>) -> Result<InstanceRef, DriverError> {
        match provider_id.filter(|id| !id.is_empty()) {
            Some(id) => request::parse_provider_id(id),
            None => Ok(InstanceRef { project: self.project.clone(), zone: self.spec.zone.clone(), name: name.into() }),
        }
    }

    fn provider_id(&self, at: &InstanceRef) -> String {
        request::provider_id(&at.project, &at.zone, &at.name)
    }

    /// The instance, if Compute Engine knows it (any status).
    async fn get(&self, at: &InstanceRef) -> Result<Option<Value>, DriverError> {
        let result = self.client.get().set_project(&at.project).set_zone(&at.zone).set_instance(&at.name).send().await;
        match result {
            Ok(instance) => Ok(Some(json_of(&instance))),
            Err(e) if Failure::of(&e).status() == Some(404) => Ok(None),
            Err(e) => Err(self.fail("instances.get", &e)),
        }
    }

    /// The instance if it is there and carries this class's cluster and role tags; `NotFound` otherwise.
    async fn find_owned(&self, at: &InstanceRef) -> Result<Value, DriverError> {
        match self.get(at).await? {
            Some(i) if request::owned(&i, &self.spec) => Ok(i),
            Some(_) => Err(DriverError::new(
                Code::NotFound,
                format!(
                    "instance {} in {}/{} does not carry the network tags {} and {}; left alone",
                    at.name, at.project, at.zone, self.spec.cluster_tag, self.spec.role_tag
                ),
            )),
            None => {
                Err(DriverError::new(Code::NotFound, format!("no instance {} in {}/{}", at.name, at.project, at.zone)))
            }
        }
    }

    /// Every instance of the class's zone carrying its cluster and role tags, all pages.
    async fn owned(&self) -> Result<Vec<Value>, DriverError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list()
                .set_project(&self.project)
                .set_zone(&self.spec.zone)
                .set_max_results(PAGE_SIZE)
                .set_or_clear_page_token(token.take())
                .send()
                .await
                .map_err(|e| self.fail("instances.list", &e))?;
            let page = json_of(&page);
            if let Some(items) = page.get("items").and_then(Value::as_array) {
                out.extend(items.iter().filter(|i| request::owned(i, &self.spec)).cloned());
            }
            match page.get("nextPageToken").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next.to_string()),
                None => return Ok(out),
            }
        }
    }

    /// Waits, with back-off and up to the operation timeout, until the zone operation `op` is `DONE`; its errors
    /// become the driver error of `method`.
    async fn wait(&self, method: &str, at: &InstanceRef, op: Value) -> Result<(), DriverError> {
        let mut pauses = operation_backoff(self.settings);
        let mut op = op;
        loop {
            let name = op.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            if op.get("status").and_then(Value::as_str) == Some("DONE") {
                let errors: Vec<(String, String)> = op
                    .pointer("/error/errors")
                    .and_then(Value::as_array)
                    .map(|errors| {
                        errors
                            .iter()
                            .map(|e| {
                                let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                                (text("code"), text("message"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if errors.is_empty() {
                    return Ok(());
                }
                return Err(Failure::Operation(errors).into_driver_error(method, &self.secret));
            }
            if name.is_empty() {
                return Err(DriverError::new(
                    Code::Internal,
                    format!("Compute {method}: the answer names no operation"),
                ));
            }
            let Some(pause) = pauses.next() else {
                return Err(DriverError::new(
                    Code::DeadlineExceeded,
                    format!(
                        "Compute {method}: operation {name} for instance {} still runs after {:?}; a retry picks up \
                         the instance",
                        at.name, self.settings.operation_timeout
                    ),
                ));
            };
            tokio::time::sleep(pause).await;
            let polled = self
                .client
                .get_operation()
                .set_project(&at.project)
                .set_zone(&at.zone)
                .set_operation(&name)
                .send()
                .await;
            op = match polled {
                Ok(op) => json_of(&op),
                // A poll that failed transiently is worth waiting out; anything else ends the wait.
                Err(e) => {
                    let err = self.fail("zoneOperations.get", &e);
                    if !matches!(err.code, Code::Unavailable | Code::DeadlineExceeded) {
                        return Err(err);
                    }
                    tracing::debug!(operation = %name, error = %err, "operation poll failed; polling on");
                    op
                }
            };
        }
    }

    /// Inserts the machine's instance and waits for the operation. `Ok(false)`: an instance of that name appeared
    /// meanwhile (409).
    async fn insert(&self, at: &InstanceRef, body: Value) -> Result<bool, DriverError> {
        let instance: Instance = serde_json::from_value(body)
            .map_err(|e| DriverError::new(Code::Internal, format!("the instance body does not fit the API: {e}")))?;
        let result = self.client.insert().set_project(&at.project).set_zone(&at.zone).set_body(instance).send().await;
        let op = match result {
            Ok(op) => json_of(&op),
            Err(e) if Failure::of(&e).status() == Some(409) => return Ok(false),
            Err(e) => return Err(self.fail("instances.insert", &e)),
        };
        let operation = op.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        tracing::info!(instance = %at.name, zone = %at.zone, %operation, "create: insert accepted");
        self.wait("instances.insert", at, op).await?;
        Ok(true)
    }
}

#[async_trait::async_trait]
impl Driver for GcpDriver {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capacity_of(&self, provider_spec: &serde_json::Value) -> Option<crate::providers::NodeCapacity> {
        super::machine_types::capacity_of(provider_spec)
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        let gce = self.prepare_machine(request).await?;
        let user_data = credentials::user_data(&request.secret)?;
        let name = &request.machine.name;
        let at = gce.locate(name, None)?;
        let body = request::instance_body(&gce.spec, &gce.project, name, user_data.expose())?;

        // Instance names are unique in a zone: an instance of this name is the machine's (a retried create after
        // a crash, a timeout or a lost answer), if it carries the class's tags.
        let instance = match gce.get(&at).await? {
            Some(existing) if request::owned(&existing, &gce.spec) => {
                tracing::info!(machine = %name, status = request::status(&existing), "create: instance exists");
                existing
            }
            Some(_) => {
                return Err(DriverError::new(
                    Code::AlreadyExists,
                    format!(
                        "an instance named {name} exists in {}/{} without the network tags {} and {}; it is not \
                         adopted",
                        at.project, at.zone, gce.spec.cluster_tag, gce.spec.role_tag
                    ),
                ));
            }
            None => {
                if !gce.insert(&at, body).await? {
                    tracing::info!(machine = %name, "create: the instance appeared meanwhile");
                }
                let created = gce.find_owned(&at).await.map_err(|e| match e.code {
                    // Inserted, yet not there or not ours: a race with someone else's instance of that name.
                    Code::NotFound => DriverError::new(Code::Internal, e.message),
                    _ => e,
                })?;
                tracing::info!(machine = %name, zone = %at.zone, "create: instance created");
                created
            }
        };
        Ok(CreateMachineResponse {
            provider_id: gce.provider_id(&at),
            node_name: name.clone(),
            last_known_state: None,
            addresses: request::addresses(&instance),
        })
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        spec_of(&request.class)?;
        Err(DriverError::new(Code::Unimplemented, "the GCP driver has nothing to initialize"))
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        // A providerID names the instance (an orphan may have no machine name); only without one is the name used.
        let provider_id = request.machine.provider_id.as_deref().filter(|id| !id.is_empty());
        let gce = match provider_id {
            Some(_) => self.prepare(&request.class, &request.secret).await?,
            None => self.prepare_machine(request).await?,
        };
        let at = gce.locate(&request.machine.name, provider_id)?;
        let done = DeleteMachineResponse { last_known_state: None };
        match gce.get(&at).await? {
            None => return Ok(done),
            // Never delete what is not this cluster's, whatever the providerID says.
            Some(i) if !request::owned(&i, &gce.spec) => {
                return Err(DriverError::new(
                    Code::NotFound,
                    format!(
                        "instance {} in {}/{} does not carry the network tags {} and {}; left alone",
                        at.name, at.project, at.zone, gce.spec.cluster_tag, gce.spec.role_tag
                    ),
                ));
            }
            Some(_) => {}
        }
        let result =
            gce.client.delete().set_project(&at.project).set_zone(&at.zone).set_instance(&at.name).send().await;
        let op = match result {
            Ok(op) => json_of(&op),
            Err(e) if Failure::of(&e).status() == Some(404) => return Ok(done),
            Err(e) => return Err(gce.fail("instances.delete", &e)),
        };
        tracing::info!(machine = %request.machine.name, instance = %at.name, zone = %at.zone, "delete: deleting");
        match gce.wait("instances.delete", &at, op).await {
            Ok(()) => Ok(done),
            Err(e) if e.code == Code::NotFound => Ok(done),
            Err(e) => Err(e),
        }
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        let gce = self.prepare_machine(request).await?;
        let at = gce.locate(&request.machine.name, request.machine.provider_id.as_deref())?;
        let instance = gce.find_owned(&at).await?;
        Ok(MachineStatusResponse {
            provider_id: gce.provider_id(&at),
            node_name: request.machine.name.clone(),
            addresses: request::addresses(&instance),
        })
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        let gce = self.prepare(&request.class, &request.secret).await?;
        Ok(gce
            .owned()
            .await?
            .iter()
            .map(|i| {
                let name = request::name(i).to_string();
                let at = InstanceRef { project: gce.project.clone(), zone: gce.spec.zone.clone(), name: name.clone() };
                (gce.provider_id(&at), name)
            })
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
    use crate::providers::gcp::credentials::tests::key_json;
    use crate::providers::gcp::spec::tests::minimal;

    fn secret() -> SecretData {
        SecretData(
            [
                ("serviceAccountJSON".to_string(), key_json("unit-project").into_bytes()),
                ("userData".to_string(), b"#cloud-config unit-test-user-data".to_vec()),
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
        let driver = GcpDriver::with_endpoint("http://127.0.0.1:1");
        let r = request(class(minimal()), secret());
        let account = Account::from_secret(&r.secret).unwrap();
        let shown = format!("{driver:?} {r:?} {account:?}");
        assert!(!shown.contains("MIIE") && !shown.contains("unit-test-user-data"), "{shown}");
    }

    #[tokio::test]
    async fn requests_fail_before_any_call_when_the_class_or_secret_is_wrong() {
        // An endpoint nothing listens on: every case must fail before reaching it.
        let driver = GcpDriver::with_endpoint("http://127.0.0.1:9");
        let mut wrong = class(minimal());
        wrong.provider = "AWS".into();
        let mut bad_spec = minimal();
        bad_spec["zone"] = json!(7);
        let no_key = SecretData([("userData".to_string(), b"x".to_vec())].into());
        let mut no_user_data = secret();
        no_user_data.0.remove("userData");
        let cases = [
            ("provider", request(wrong, secret()), "has provider \"AWS\", this driver serves \"GCP\""),
            ("spec", request(class(bad_spec), secret()), "providerSpec.zone: must be a string"),
            ("key", request(class(minimal()), no_key), "secret: needs serviceAccountJSON"),
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
        let mut bad_name = request(class(minimal()), secret());
        bad_name.machine.name = "Worker_1".into();
        let err = driver.create_machine(&bad_name).await.unwrap_err();
        assert!(err.message.contains("cannot be a Compute Engine instance name"), "{err}");
        let mut bad_id = request(class(minimal()), secret());
        bad_id.machine.provider_id = Some("aws:///eu-west-1/i-1".into());
        assert_eq!(driver.delete_machine(&bad_id).await.unwrap_err().code, Code::InvalidArgument);
        // A key whose private key is not a key fails when a token is needed, as Unauthenticated, unshown.
        let err = driver.get_machine_status(&request(class(minimal()), secret())).await.unwrap_err();
        assert!(!format!("{err:?}").contains("MIIE"), "{err:?}");
    }

    #[tokio::test]
    async fn initialize_is_unimplemented() {
        let driver = GcpDriver::with_endpoint("http://127.0.0.1:9");
        let err = driver.initialize_machine(&request(class(minimal()), secret())).await.unwrap_err();
        assert_eq!(err.code, Code::Unimplemented, "{err}");
    }

    #[test]
    fn operation_polls_back_off_and_stop_at_the_timeout() {
        let s = |secs| Duration::from_secs(secs);
        let settings = GcpSettings {
            operation_timeout: s(30),
            operation_first_poll: s(1),
            operation_max_poll: s(8),
            ..GcpSettings::default()
        };
        let pauses: Vec<Duration> = operation_backoff(&settings).collect();
        assert_eq!(pauses, [s(1), s(2), s(4), s(8), s(8)]);
        assert!(pauses.iter().sum::<Duration>() <= settings.operation_timeout);
    }

    #[test]
    fn cache_keys_differ_by_everything_and_hide_the_keys() {
        let creds = Account::from_secret(&secret()).unwrap().credentials;
        let a = cache_key(None, Some(&creds));
        assert_ne!(a, cache_key(Some("http://x"), Some(&creds)));
        assert_ne!(a, cache_key(None, None));
        let other = Credentials::ServiceAccount(crate::providers::secrets::Sensitive::new(key_json("other")));
        assert_ne!(a, cache_key(None, Some(&other)));
        assert!(!a.contains("MIIE") && a.len() == 64);
    }
}
