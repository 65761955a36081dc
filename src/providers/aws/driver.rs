//! [`AwsDriver`]: the [`Driver`] contract over EC2.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use aws_config::provider_config::ProviderConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::web_identity_token::{StaticConfiguration, WebIdentityTokenCredentialsProvider};
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::Region;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{Filter, Instance, NetworkInterfaceType};
use sha2::{Digest, Sha256};

use super::credentials::{self, Credentials};
use super::errors::Failure;
use super::request;
use super::spec::{self, ProviderSpec};
use crate::providers::{
    ClassInfo, Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse, SecretData,
};

/// The `MachineClass.provider` value the AWS driver serves.
pub const PROVIDER: &str = "AWS";

/// Clients are cached per region, endpoint and credentials (so connections and web-identity sessions are reused);
/// past this many the cache starts afresh.
const MAX_CACHED_CLIENTS: usize = 64;

/// Tunables; the defaults suit AWS, tests shorten them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsSettings {
    /// How long create waits for a new instance to show in DescribeInstances (EC2 is eventually consistent).
    pub visibility_timeout: Duration,
    /// The first pause of that wait; it doubles up to 5 s.
    pub visibility_first_poll: Duration,
    /// Attempts per EC2 call, throttling and transient failures included (the SDK's standard retry).
    pub max_attempts: u32,
    /// The SDK's first retry back-off.
    pub initial_backoff: Duration,
    /// Time limit of one attempt of an EC2 call.
    pub attempt_timeout: Duration,
}

impl Default for AwsSettings {
    fn default() -> Self {
        AwsSettings {
            visibility_timeout: Duration::from_secs(300),
            visibility_first_poll: Duration::from_millis(500),
            max_attempts: 5,
            initial_backoff: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(60),
        }
    }
}

/// The AWS EC2 driver (provider `AWS`), compatible with Gardener's AWS MachineClasses; see `docs/providers/aws.md`.
///
/// Credentials, region and endpoint come with each request (class secret and providerSpec), so one driver serves
/// every class. `Debug` shows no credentials.
pub struct AwsDriver {
    endpoint: Option<String>,
    settings: AwsSettings,
    base: tokio::sync::OnceCell<SdkConfig>,
    clients: Mutex<HashMap<String, Client>>,
}

impl fmt::Debug for AwsDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = self.clients.lock().map(|c| c.len()).unwrap_or_default();
        f.debug_struct("AwsDriver")
            .field("endpoint", &self.endpoint)
            .field("settings", &self.settings)
            .field("cached_clients", &cached)
            .finish()
    }
}

impl Default for AwsDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl AwsDriver {
    /// A driver for AWS's regional endpoints (or `AWS_ENDPOINT_URL_EC2` / `AWS_ENDPOINT_URL`, or a class secret's
    /// `endpoint`).
    pub fn new() -> Self {
        AwsDriver {
            endpoint: None,
            settings: AwsSettings::default(),
            base: tokio::sync::OnceCell::new(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// A driver for an EC2-compatible endpoint (moto in tests, an AWS-compatible cloud); a class secret's
    /// `endpoint` still wins.
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        AwsDriver { endpoint: Some(endpoint.into()), ..Self::new() }
    }

    /// The same driver with other tunables.
    pub fn with_settings(mut self, settings: AwsSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The tunables in use.
    pub fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    /// Shared SDK configuration (HTTP client, retries, timeouts); region and credentials are set per call.
    async fn base(&self) -> &SdkConfig {
        let s = &self.settings;
        self.base
            .get_or_init(|| async {
                aws_config::defaults(BehaviorVersion::latest())
                    // A placeholder, so loading never asks the instance metadata service for a region.
                    .region(Region::from_static("us-east-1"))
                    .no_credentials()
                    .retry_config(
                        RetryConfig::standard()
                            .with_max_attempts(s.max_attempts)
                            .with_initial_backoff(s.initial_backoff),
                    )
                    .timeout_config(
                        TimeoutConfig::builder()
                            .connect_timeout(Duration::from_secs(10))
                            .operation_attempt_timeout(s.attempt_timeout)
                            .build(),
                    )
                    .load()
                    .await
            })
            .await
    }

    /// An EC2 client for the request's region, credentials and endpoint.
    async fn client(&self, secret: &SecretData, region: &str) -> Result<Client, DriverError> {
        let creds = Credentials::from_secret(secret)?;
        let endpoint = credentials::endpoint(secret, self.endpoint.as_deref(), |k| std::env::var(k).ok())?;
        let key = cache_key(region, endpoint.as_deref(), &creds);
        if let Some(client) = self.clients.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(client);
        }
        let base = self.base().await;
        let region = Region::new(region.to_string());
        let mut config = aws_sdk_ec2::config::Builder::from(base).region(region.clone());
        config = match creds {
            Credentials::Static { access_key_id, secret_access_key } => {
                config.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                    access_key_id.expose(),
                    secret_access_key.expose(),
                    None,
                    None,
                    "machine-class-secret",
                ))
            }
            Credentials::WebIdentity { token_file, role_arn } => {
                let provider_config = ProviderConfig::default().with_region(Some(region));
                config.credentials_provider(
                    WebIdentityTokenCredentialsProvider::builder()
                        .static_configuration(StaticConfiguration {
                            web_identity_token_file: token_file.into(),
                            role_arn,
                            session_name: "machine-controller-manager".to_string(),
                        })
                        .configure(&provider_config)
                        .build(),
                )
            }
        };
        if let Some(url) = endpoint {
            config = config.endpoint_url(url);
        }
        let client = Client::from_conf(config.build());
        if let Ok(mut clients) = self.clients.lock() {
            if clients.len() >= MAX_CACHED_CLIENTS {
                clients.clear();
            }
            clients.insert(key, client.clone());
        }
        Ok(client)
    }

    /// The parsed spec and a client, for a class that must be ours.
    async fn prepare(&self, class: &ClassInfo, secret: &SecretData) -> Result<Ec2<'_>, DriverError> {
        let spec = spec_of(class)?;
        let client = self.client(secret, &spec.region).await?;
        Ok(Ec2 { client, spec, secret: secret.clone(), settings: &self.settings })
    }

    /// As [`Self::prepare`], for a request that must name its machine.
    async fn prepare_machine(&self, request: &MachineRequest) -> Result<Ec2<'_>, DriverError> {
        let spec = spec_of(&request.class)?;
        if request.machine.name.is_empty() {
            return Err(DriverError::new(Code::InvalidArgument, "the machine has no name"));
        }
        let client = self.client(&request.secret, &spec.region).await?;
        Ok(Ec2 { client, spec, secret: request.secret.clone(), settings: &self.settings })
    }
}

/// A hash naming one client configuration (never the credentials themselves).
fn cache_key(region: &str, endpoint: Option<&str>, creds: &Credentials) -> String {
    let mut h = Sha256::new();
    for part in [region, endpoint.unwrap_or("")] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    match creds {
        Credentials::Static { access_key_id, secret_access_key } => {
            for part in ["static", access_key_id.expose(), secret_access_key.expose()] {
                h.update(part.as_bytes());
                h.update([0]);
            }
        }
        Credentials::WebIdentity { token_file, role_arn } => {
            for part in ["web-identity", token_file.as_str(), role_arn.as_str()] {
                h.update(part.as_bytes());
                h.update([0]);
            }
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

fn provider_id_of(request: &MachineRequest) -> Option<&str> {
    request.machine.provider_id.as_deref().filter(|id| !id.is_empty())
}

fn instance_id_of(instance: &Instance) -> &str {
    instance.instance_id().unwrap_or_default()
}

/// One request's view of EC2: a client, the parsed spec, and the secret (to scrub error text).
struct Ec2<'a> {
    client: Client,
    spec: ProviderSpec,
    secret: SecretData,
    settings: &'a AwsSettings,
}

impl Ec2<'_> {
    fn fail<E, R>(&self, operation: &str, err: &SdkError<E, R>) -> DriverError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: fmt::Debug,
    {
        Failure::of(err).into_driver_error(operation, &self.secret)
    }

    /// The zone form `aws:///<zone>/<id>` from the instance's placement (the region form without one).
    fn provider_id(&self, instance: &Instance) -> String {
        request::provider_id(request::zone_of(instance), &self.spec.region, instance_id_of(instance))
    }

    /// Every instance matching `filters`, all pages.
    async fn describe(&self, filters: Vec<Filter>) -> Result<Vec<Instance>, DriverError> {
        let mut pages = self.client.describe_instances().set_filters(Some(filters)).into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.fail("DescribeInstances", &e))?;
            out.extend(page.reservations().iter().flat_map(|r| r.instances().iter().cloned()));
        }
        Ok(out)
    }

    /// The instance with this ID, if EC2 knows it (terminated ones included).
    async fn by_id(&self, instance_id: &str) -> Result<Option<Instance>, DriverError> {
        match self.client.describe_instances().instance_ids(instance_id).send().await {
            Ok(out) => Ok(out.reservations().iter().flat_map(|r| r.instances()).next().cloned()),
            Err(e) if Failure::of(&e).aws_code().is_some_and(|c| c.starts_with("InvalidInstanceID")) => Ok(None),
            Err(e) => Err(self.fail("DescribeInstances", &e)),
        }
    }

    /// The live instances of this class's cluster and role, optionally only those of one machine.
    async fn owned(&self, machine: Option<&str>) -> Result<Vec<Instance>, DriverError> {
        let found = self.describe(request::owner_filters(&self.spec, machine)).await?;
        Ok(found.into_iter().filter(|i| request::is_live(i) && request::owned(i, &self.spec, machine)).collect())
    }

    /// The machine's instance: by its tags, else by `provider_id`. `NotFound` for none, `OutOfRange` for several.
    async fn find(&self, name: &str, provider_id: Option<&str>) -> Result<Instance, DriverError> {
        let mut tagged = self.owned(Some(name)).await?;
        match tagged.len() {
            1 => return Ok(tagged.remove(0)),
            n if n > 1 => {
                let ids: Vec<&str> = tagged.iter().map(instance_id_of).collect();
                return Err(DriverError::new(
                    Code::OutOfRange,
                    format!("{n} instances are tagged for machine {name:?}: {}", ids.join(", ")),
                ));
            }
            _ => {}
        }
        let Some(provider_id) = provider_id else {
            return Err(DriverError::new(Code::NotFound, format!("no instance is tagged for machine {name:?}")));
        };
        let id = request::instance_id(provider_id)?;
        match self.by_id(&id).await? {
            Some(i) if request::is_live(&i) && request::owned(&i, &self.spec, None) => Ok(i),
            Some(i) if request::is_live(&i) => Err(DriverError::new(
                Code::NotFound,
                format!(
                    "instance {id} does not carry the tag keys {} and {}",
                    self.spec.cluster_tag, self.spec.role_tag
                ),
            )),
            _ => Err(DriverError::new(Code::NotFound, format!("no live instance {id} (providerID {provider_id:?})"))),
        }
    }

    /// Waits (bounded, with back-off) until DescribeInstances shows the instance with its private DNS name.
    async fn wait_visible(&self, instance_id: &str) -> Result<Instance, DriverError> {
        let deadline = tokio::time::Instant::now() + self.settings.visibility_timeout;
        let mut pause = self.settings.visibility_first_poll;
        loop {
            let last = match self.by_id(instance_id).await {
                Ok(Some(i)) if i.private_dns_name().is_some_and(|n| !n.is_empty()) => return Ok(i),
                Ok(Some(_)) => "visible, without a private DNS name yet".to_string(),
                Ok(None) => "not visible yet".to_string(),
                // Transient failures are worth waiting out too; anything else ends the wait.
                Err(e) if matches!(e.code, Code::Unavailable | Code::DeadlineExceeded) => e.message,
                Err(e) => return Err(e),
            };
            if tokio::time::Instant::now() + pause > deadline {
                return Err(DriverError::new(
                    Code::Internal,
                    format!(
                        "instance {instance_id} was created but is {last} after {:?}; a retried create finds it by \
                         its tags",
                        self.settings.visibility_timeout
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// The AMI's root device name (for the root block device), or `NotFound` when the AMI does not exist.
    async fn root_device_name(&self) -> Result<Option<String>, DriverError> {
        let ami = &self.spec.ami;
        let out = self.client.describe_images().image_ids(ami).send().await.map_err(|e| {
            match Failure::of(&e).aws_code() {
                Some(c) if c.starts_with("InvalidAMIID") => {
                    DriverError::new(Code::NotFound, format!("AMI {ami} not found ({c})"))
                }
                _ => self.fail("DescribeImages", &e),
            }
        })?;
        match out.images().first() {
            Some(image) => Ok(image.root_device_name().map(str::to_string)),
            None => Err(DriverError::new(Code::NotFound, format!("AMI {ami} not found"))),
        }
    }

    /// RunInstances for one instance of `machine`; the instance as RunInstances answers it.
    async fn run_instance(
        &self,
        request: &MachineRequest,
        root_device: Option<&str>,
        token: String,
    ) -> Result<Result<Instance, Failure>, DriverError> {
        let spec = &self.spec;
        let user_data = credentials::user_data(&request.secret)?;
        let annotated = spec::annotated_placement(request.machine.node_template.as_ref())?;
        let run = self
            .client
            .run_instances()
            .image_id(&spec.ami)
            .instance_type(spec.machine_type.as_str().into())
            .min_count(1)
            .max_count(1)
            .client_token(token)
            .user_data(user_data.expose())
            .iam_instance_profile(request::iam_profile(spec))
            .set_key_name(spec.key_name.clone())
            .set_network_interfaces(Some(request::network_interfaces(spec)))
            .set_block_device_mappings(
                Some(request::block_device_mappings(spec, root_device)?).filter(|b| !b.is_empty()),
            )
            .set_tag_specifications(Some(request::tag_specifications(spec, &request.machine.name)))
            .set_metadata_options(request::metadata_options(spec))
            .set_instance_market_options(request::market_options(spec))
            .set_placement(request::placement_of(spec, annotated.as_ref()))
            .set_capacity_reservation_specification(request::capacity_reservation(spec))
            .set_cpu_options(request::cpu_options(spec))
            .set_ebs_optimized(spec.ebs_optimized.then_some(true))
            .set_monitoring(
                spec.monitoring
                    .then(|| aws_sdk_ec2::types::RunInstancesMonitoringEnabled::builder().enabled(true).build()),
            );
        match run.send().await {
            Ok(out) => match out.instances().first() {
                Some(i) if i.instance_id().is_some() => Ok(Ok(i.clone())),
                _ => Err(DriverError::new(Code::Internal, "EC2 RunInstances: the answer names no instance")),
            },
            Err(e) => Ok(Err(Failure::of(&e))),
        }
    }

    /// Whether the instance still needs `initialize_machine`, and why.
    fn pending_initialization(&self, instance: &Instance) -> Option<String> {
        let id = instance_id_of(instance);
        if self.spec.src_and_dst_checks_enabled == Some(false) {
            let checked = instance
                .network_interfaces()
                .iter()
                .filter(|n| !is_efa(n.interface_type()))
                // An interface that does not say counts as done, as in Gardener's driver.
                .any(|n| n.source_dest_check() == Some(true));
            if checked {
                return Some(format!(
                    "instance {id} still has the source/destination check on (providerSpec.srcAndDstChecksEnabled=false)"
                ));
            }
        }
        for nic in instance.network_interfaces() {
            let Some(index) = nic.attachment().and_then(|a| a.device_index()) else { continue };
            let Some(want) = self.ipv6_prefixes_for(index) else { continue };
            let have = nic.ipv6_prefixes().len();
            if have < want as usize {
                return Some(format!(
                    "instance {id}: network interface {} has {have} of {want} IPv6 prefixes",
                    nic.network_interface_id().unwrap_or_default()
                ));
            }
        }
        None
    }

    /// `ipv6PrefixCount` of the providerSpec's interface at device index `index`.
    fn ipv6_prefixes_for(&self, index: i32) -> Option<i32> {
        self.spec
            .network_interfaces
            .iter()
            .zip(0i32..)
            .find(|(nic, position)| nic.device_index.unwrap_or(*position) == index)
            .and_then(|(nic, _)| nic.ipv6_prefix_count)
            .filter(|&c| c > 0)
    }
}

/// EFA interfaces have no source/destination check to turn off.
fn is_efa(kind: Option<&str>) -> bool {
    kind.is_some_and(|k| k == NetworkInterfaceType::Efa.as_str() || k == NetworkInterfaceType::EfaOnly.as_str())
}

/// A fresh token suffix: the stable token was spent on an instance that is gone.
fn token_attempt() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64).max(1)
}

#[async_trait::async_trait]
impl Driver for AwsDriver {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capacity_of(&self, provider_spec: &serde_json::Value) -> Option<crate::providers::NodeCapacity> {
        super::instance_types::capacity_of(provider_spec)
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        let ec2 = self.prepare_machine(request).await?;
        let name = &request.machine.name;
        // Check what we need from the secret before touching EC2.
        credentials::user_data(&request.secret)?;

        // First guard: an instance already tagged for this machine (a retried create after a crash or timeout).
        let existing = match ec2.find(name, None).await {
            Ok(instance) => Some(instance),
            Err(e) if e.code == Code::NotFound => None,
            Err(e) => return Err(e),
        };
        let (instance, launched) = match existing {
            Some(instance) => {
                tracing::info!(machine = %name, instance = instance_id_of(&instance), "create: instance exists");
                (instance, false)
            }
            None => {
                let root_device = ec2.root_device_name().await?;
                // Second guard: the ClientToken makes EC2 itself answer a repeated RunInstances with the first
                // instance. A token whose instance is gone (the machine name was used before) gets a fresh one.
                let token = request::client_token(&request.machine.namespace, name, 0);
                let first = ec2.run_instance(request, root_device.as_deref(), token).await?;
                let spent = match &first {
                    Ok(i) => request::is_gone(i),
                    Err(f) => f.aws_code() == Some("IdempotentParameterMismatch"),
                };
                let launched = if spent {
                    tracing::info!(machine = %name, "create: the client token was spent; retrying with a fresh one");
                    let token = request::client_token(&request.machine.namespace, name, token_attempt());
                    ec2.run_instance(request, root_device.as_deref(), token).await?
                } else {
                    first
                };
                let instance = launched.map_err(|f| f.into_driver_error("RunInstances", &request.secret))?;
                tracing::info!(machine = %name, instance = instance_id_of(&instance), "create: instance launched");
                (instance, true)
            }
        };
        // A new instance is answered only once DescribeInstances shows it (EC2 is eventually consistent), so the
        // next status call finds what create reported.
        let named = instance.private_dns_name().is_some_and(|n| !n.is_empty());
        let instance = if launched || !named { ec2.wait_visible(instance_id_of(&instance)).await? } else { instance };
        Ok(CreateMachineResponse {
            provider_id: ec2.provider_id(&instance),
            node_name: instance.private_dns_name().unwrap_or_default().to_string(),
            last_known_state: None,
            addresses: request::addresses(&instance),
        })
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        let spec = spec_of(&request.class)?;
        if !spec.needs_initialization() {
            return Err(DriverError::new(
                Code::Unimplemented,
                "nothing to initialize (srcAndDstChecksEnabled is not false and no ipv6PrefixCount is set)",
            ));
        }
        // Failures leave the machine Uninitialized, so the controller calls again (as Gardener's driver does).
        let uninitialized = |e: DriverError| DriverError::new(Code::Uninitialized, e.message);
        let ec2 = self.prepare_machine(request).await.map_err(uninitialized)?;
        let instance = ec2.find(&request.machine.name, provider_id_of(request)).await.map_err(uninitialized)?;
        let id = instance_id_of(&instance).to_string();
        if spec.src_and_dst_checks_enabled == Some(false) {
            for nic in instance.network_interfaces() {
                if is_efa(nic.interface_type()) || nic.source_dest_check() == Some(false) {
                    continue;
                }
                ec2.client
                    .modify_network_interface_attribute()
                    .set_network_interface_id(nic.network_interface_id().map(str::to_string))
                    .source_dest_check(request::source_dest_check_off())
                    .send()
                    .await
                    .map_err(|e| uninitialized(ec2.fail("ModifyNetworkInterfaceAttribute", &e)))?;
                tracing::info!(instance = %id, nic = nic.network_interface_id(), "initialize: source/destination check off");
            }
        }
        for nic in instance.network_interfaces() {
            let Some(index) = nic.attachment().and_then(|a| a.device_index()) else { continue };
            let Some(want) = ec2.ipv6_prefixes_for(index) else { continue };
            let have = i32::try_from(nic.ipv6_prefixes().len()).unwrap_or(i32::MAX);
            if have >= want {
                continue;
            }
            ec2.client
                .assign_ipv6_addresses()
                .set_network_interface_id(nic.network_interface_id().map(str::to_string))
                .ipv6_prefix_count(want - have)
                .send()
                .await
                .map_err(|e| uninitialized(ec2.fail("AssignIpv6Addresses", &e)))?;
            tracing::info!(instance = %id, nic = nic.network_interface_id(), prefixes = want - have, "initialize: IPv6 prefixes assigned");
        }
        Ok(InitializeMachineResponse {
            provider_id: ec2.provider_id(&instance),
            node_name: instance.private_dns_name().unwrap_or_default().to_string(),
            addresses: request::addresses(&instance),
        })
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        // A providerID is enough (an orphan VM without a `Name` tag has no machine name); only the search by tags
        // needs the name.
        let ec2 = match provider_id_of(request) {
            Some(_) => self.prepare(&request.class, &request.secret).await?,
            None => self.prepare_machine(request).await?,
        };
        let ids: Vec<String> = match provider_id_of(request) {
            Some(provider_id) => {
                let id = request::instance_id(provider_id)?;
                match ec2.by_id(&id).await? {
                    None => Vec::new(),
                    Some(i) if request::is_gone(&i) => Vec::new(),
                    // Never terminate what is not this cluster's, whatever the providerID says.
                    Some(i) if !request::owned(&i, &ec2.spec, None) => {
                        return Err(DriverError::new(
                            Code::NotFound,
                            format!(
                                "instance {id} does not carry the tag keys {} and {}; left alone",
                                ec2.spec.cluster_tag, ec2.spec.role_tag
                            ),
                        ));
                    }
                    Some(_) => vec![id],
                }
            }
            // Without a providerID: every live instance tagged for this machine in this cluster and role.
            None => {
                ec2.owned(Some(&request.machine.name)).await?.iter().map(|i| instance_id_of(i).to_string()).collect()
            }
        };
        if ids.is_empty() {
            return Ok(DeleteMachineResponse { last_known_state: None });
        }
        match ec2.client.terminate_instances().set_instance_ids(Some(ids.clone())).send().await {
            Ok(_) => {
                tracing::info!(machine = %request.machine.name, instances = ?ids, "delete: terminating");
                Ok(DeleteMachineResponse { last_known_state: None })
            }
            Err(e) if Failure::of(&e).aws_code() == Some("InvalidInstanceID.NotFound") => {
                Ok(DeleteMachineResponse { last_known_state: None })
            }
            Err(e) => Err(ec2.fail("TerminateInstances", &e)),
        }
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        let ec2 = self.prepare_machine(request).await?;
        let instance = ec2.find(&request.machine.name, provider_id_of(request)).await?;
        if let Some(why) = ec2.pending_initialization(&instance) {
            return Err(DriverError::new(Code::Uninitialized, why));
        }
        Ok(MachineStatusResponse {
            provider_id: ec2.provider_id(&instance),
            node_name: instance.private_dns_name().unwrap_or_default().to_string(),
            addresses: request::addresses(&instance),
        })
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        let ec2 = self.prepare(&request.class, &request.secret).await?;
        Ok(ec2
            .owned(None)
            .await?
            .iter()
            .map(|i| (ec2.provider_id(i), request::tag(i, request::NAME_TAG).unwrap_or_default().to_string()))
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
    use crate::providers::aws::spec::tests::minimal;

    fn secret() -> SecretData {
        SecretData(
            [
                ("providerAccessKeyId".to_string(), b"AKIAUNITTESTKEYID".to_vec()),
                ("providerSecretAccessKey".to_string(), b"unit-test-secret-access-key".to_vec()),
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

    fn class(spec: serde_json::Value) -> ClassInfo {
        ClassInfo { name: "c".into(), provider: PROVIDER.into(), provider_spec: spec, node_template: None }
    }

    #[test]
    fn debug_shows_no_credentials() {
        let driver = AwsDriver::with_endpoint("http://127.0.0.1:1");
        let r = request(class(minimal()), secret());
        let shown = format!("{driver:?} {r:?} {:?}", Credentials::from_secret(&r.secret).unwrap());
        for (_, value) in r.secret.0.iter() {
            assert!(!shown.contains(String::from_utf8_lossy(value).as_ref()), "{shown}");
        }
    }

    #[tokio::test]
    async fn requests_fail_before_any_call_when_the_class_or_secret_is_wrong() {
        // An endpoint nothing listens on: every case must fail before reaching it.
        let driver = AwsDriver::with_endpoint("http://127.0.0.1:9");
        let mut wrong = class(minimal());
        wrong.provider = "GCP".into();
        let mut bad_spec = minimal();
        bad_spec["region"] = json!(7);
        let no_keys = SecretData([("userData".to_string(), b"x".to_vec())].into());
        let mut no_user_data = secret();
        no_user_data.0.remove("userData");
        let cases = [
            ("provider", request(wrong, secret()), "has provider \"GCP\", this driver serves \"AWS\""),
            ("spec", request(class(bad_spec), secret()), "providerSpec.region: must be a string"),
            ("keys", request(class(minimal()), no_keys), "secret: needs providerAccessKeyId"),
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
        bad_id.machine.provider_id = Some("gce:///x/y".into());
        let err = driver.delete_machine(&bad_id).await.unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument, "{err}");
    }

    #[tokio::test]
    async fn initialize_is_unimplemented_without_work() {
        let driver = AwsDriver::with_endpoint("http://127.0.0.1:9");
        let err = driver.initialize_machine(&request(class(minimal()), secret())).await.unwrap_err();
        assert_eq!(err.code, Code::Unimplemented, "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_unavailable_and_shows_no_secret() {
        let settings = AwsSettings { max_attempts: 2, initial_backoff: Duration::from_millis(1), ..Default::default() };
        let driver = AwsDriver::with_endpoint("http://127.0.0.1:9").with_settings(settings);
        let r = request(class(minimal()), secret());
        let err = driver.get_machine_status(&r).await.unwrap_err();
        assert_eq!(err.code, Code::Unavailable, "{err}");
        assert!(err.message.starts_with("EC2 DescribeInstances: cannot reach the endpoint"), "{err}");
        let shown = format!("{err} {err:?}");
        for value in ["AKIAUNITTESTKEYID", "unit-test-secret-access-key", "unit-test-user-data"] {
            assert!(!shown.contains(value), "{shown}");
        }
    }

    #[test]
    fn cache_keys_differ_by_everything_and_hide_the_keys() {
        let creds = Credentials::from_secret(&secret()).unwrap();
        let a = cache_key("eu-west-1", None, &creds);
        assert_ne!(a, cache_key("eu-west-2", None, &creds));
        assert_ne!(a, cache_key("eu-west-1", Some("http://x"), &creds));
        let mut other = secret();
        other.0.insert("providerSecretAccessKey".into(), b"rotated".to_vec());
        assert_ne!(a, cache_key("eu-west-1", None, &Credentials::from_secret(&other).unwrap()));
        assert!(!a.contains("AKIA"));
    }
}
