//! The driver conformance suite: what every [`Driver`] must do, checked against a live driver (the in-memory
//! cloud, moto for AWS, the local fakes for Azure and GCP). A driver's test builds a [`Fixture`] and calls [`run`];
//! see `docs/adding-a-provider.md`.
//!
//! The checks create VMs named `<machine_prefix>-<check>` and delete them again, so a shared cloud account keeps
//! nothing. Every error a driver returns is also checked for secret data.

use std::collections::BTreeMap;

use super::{ClassInfo, Code, Driver, DriverError, ListMachinesRequest, MachineInfo, MachineRequest, SecretData};

/// What the suite needs to know about a driver's world.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// A valid class for "this" cluster and role.
    pub class: ClassInfo,
    /// A valid class of another cluster (same provider).
    pub other_cluster_class: ClassInfo,
    /// A class whose providerSpec is invalid.
    pub invalid_class: ClassInfo,
    /// The providerSpec field the error for `invalid_class` must name.
    pub invalid_field: String,
    /// A class of another provider.
    pub wrong_provider_class: ClassInfo,
    /// Secret data handed with every request; none of its values may appear in an error.
    pub secret: SecretData,
    /// The machines' namespace.
    pub namespace: String,
    /// Prefix of the machine names the checks create (unique per run on a shared cloud).
    pub machine_prefix: String,
    /// A well-formed providerID of a VM that does not exist, if the driver's IDs can be made up.
    pub absent_provider_id: Option<String>,
}

impl Fixture {
    /// A request about machine `<machine_prefix>-<suffix>` with `class`, the fixture's secret and `provider_id`.
    pub fn request(&self, suffix: &str, class: &ClassInfo, provider_id: Option<&str>) -> MachineRequest {
        MachineRequest {
            machine: MachineInfo {
                name: format!("{}-{suffix}", self.machine_prefix),
                namespace: self.namespace.clone(),
                provider_id: provider_id.map(str::to_string),
                ..Default::default()
            },
            class: class.clone(),
            secret: self.secret.clone(),
            last_known_state: None,
        }
    }

    fn list_request(&self, class: &ClassInfo) -> ListMachinesRequest {
        ListMachinesRequest { class: class.clone(), secret: self.secret.clone() }
    }
}

/// A failed check: its name and what was seen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("conformance check {check:?} failed: {detail}")]
pub struct ConformanceFailure {
    /// The check (one of [`CHECKS`]).
    pub check: &'static str,
    /// What was expected and what the driver did.
    pub detail: String,
}

/// Name of [`create_is_idempotent`].
pub const CREATE_IDEMPOTENT: &str = "create is idempotent";
/// Name of [`status_of_absent_vm_is_not_found`].
pub const STATUS_ABSENT: &str = "status of an absent VM is NotFound";
/// Name of [`list_is_scoped_to_cluster_and_role`].
pub const LIST_SCOPED: &str = "list returns exactly this cluster's VMs";
/// Name of [`delete_is_idempotent`].
pub const DELETE_IDEMPOTENT: &str = "delete is idempotent";
/// Name of [`delete_by_provider_id_needs_no_name`].
pub const DELETE_BY_PROVIDER_ID: &str = "delete by providerID needs no machine name";
/// Name of [`invalid_provider_spec_names_the_field`].
pub const INVALID_SPEC: &str = "invalid providerSpec is InvalidArgument naming the field";
/// Name of [`provider_mismatch_is_invalid_argument`].
pub const PROVIDER_MISMATCH: &str = "provider mismatch is InvalidArgument";

/// Every check, in the order [`run`] runs them.
pub const CHECKS: [&str; 7] = [
    CREATE_IDEMPOTENT,
    STATUS_ABSENT,
    LIST_SCOPED,
    DELETE_IDEMPOTENT,
    DELETE_BY_PROVIDER_ID,
    INVALID_SPEC,
    PROVIDER_MISMATCH,
];

/// Runs every check in order; the first failure ends the run.
pub async fn run(driver: &dyn Driver, fixture: &Fixture) -> Result<(), ConformanceFailure> {
    create_is_idempotent(driver, fixture).await?;
    status_of_absent_vm_is_not_found(driver, fixture).await?;
    list_is_scoped_to_cluster_and_role(driver, fixture).await?;
    delete_is_idempotent(driver, fixture).await?;
    delete_by_provider_id_needs_no_name(driver, fixture).await?;
    invalid_provider_spec_names_the_field(driver, fixture).await?;
    provider_mismatch_is_invalid_argument(driver, fixture).await
}

fn fail(check: &'static str, detail: impl Into<String>) -> ConformanceFailure {
    ConformanceFailure { check, detail: detail.into() }
}

/// Fails when a secret value shows in an error. Values shorter than 4 bytes are too common to judge.
fn no_secret(check: &'static str, fixture: &Fixture, what: &str, err: &DriverError) -> Result<(), ConformanceFailure> {
    let shown = format!("{err} {err:?}");
    for (key, value) in &fixture.secret.0 {
        let value = String::from_utf8_lossy(value);
        if value.len() >= 4 && shown.contains(value.as_ref()) {
            return Err(fail(check, format!("{what}: the error shows the value of secret key {key:?}")));
        }
    }
    Ok(())
}

/// A call's result must be Ok.
fn ok<T>(
    check: &'static str,
    fixture: &Fixture,
    what: &str,
    result: Result<T, DriverError>,
) -> Result<T, ConformanceFailure> {
    result.or_else(|err| {
        no_secret(check, fixture, what, &err)?;
        Err(fail(check, format!("{what}: expected success, got {err}")))
    })
}

/// A call's result must be an error with one of `codes`.
fn err_with<T: std::fmt::Debug>(
    check: &'static str,
    fixture: &Fixture,
    what: &str,
    result: Result<T, DriverError>,
    codes: &[Code],
) -> Result<DriverError, ConformanceFailure> {
    let want: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    match result {
        Ok(value) => Err(fail(check, format!("{what}: expected {}, got success {value:?}", want.join(" or ")))),
        Err(err) => {
            no_secret(check, fixture, what, &err)?;
            if codes.contains(&err.code) {
                Ok(err)
            } else {
                Err(fail(check, format!("{what}: expected {}, got {err}", want.join(" or "))))
            }
        }
    }
}

/// Ok, or one of `codes` (e.g. a second delete may say NotFound).
fn ok_or<T>(
    check: &'static str,
    fixture: &Fixture,
    what: &str,
    result: Result<T, DriverError>,
    codes: &[Code],
) -> Result<(), ConformanceFailure> {
    match result {
        Ok(_) => Ok(()),
        Err(err) => {
            no_secret(check, fixture, what, &err)?;
            if codes.contains(&err.code) {
                Ok(())
            } else {
                Err(fail(check, format!("{what}: expected success or {codes:?}, got {err}")))
            }
        }
    }
}

/// Creating one machine twice yields one VM (same providerID), which status finds by name and by providerID.
pub async fn create_is_idempotent(driver: &dyn Driver, fixture: &Fixture) -> Result<(), ConformanceFailure> {
    const CHECK: &str = CREATE_IDEMPOTENT;
    let request = fixture.request("idempotent", &fixture.class, None);
    let first = ok(CHECK, fixture, "first create", driver.create_machine(&request).await)?;
    let result = async {
        if first.provider_id.is_empty() || first.node_name.is_empty() {
            return Err(fail(CHECK, format!("first create returned an empty providerID or node name: {first:?}")));
        }
        let second = ok(CHECK, fixture, "second create", driver.create_machine(&request).await)?;
        if second.provider_id != first.provider_id {
            return Err(fail(
                CHECK,
                format!(
                    "second create returned providerID {:?}, the first {:?}",
                    second.provider_id, first.provider_id
                ),
            ));
        }
        let by_id = fixture.request("idempotent", &fixture.class, Some(&first.provider_id));
        for (what, req) in [("status by machine name", &request), ("status by providerID", &by_id)] {
            match driver.get_machine_status(req).await {
                Ok(status) if status.provider_id == first.provider_id => {}
                Ok(status) => {
                    return Err(fail(
                        CHECK,
                        format!("{what}: providerID {:?}, created {:?}", status.provider_id, first.provider_id),
                    ));
                }
                // A driver that needs initialization may say so; the VM was found.
                Err(err) if err.code == Code::Uninitialized => no_secret(CHECK, fixture, what, &err)?,
                Err(err) => {
                    no_secret(CHECK, fixture, what, &err)?;
                    return Err(fail(CHECK, format!("{what}: expected the created VM, got {err}")));
                }
            }
        }
        Ok(())
    }
    .await;
    let by_id = fixture.request("idempotent", &fixture.class, Some(&first.provider_id));
    let cleanup = ok_or(CHECK, fixture, "clean-up delete", driver.delete_machine(&by_id).await, &[Code::NotFound]);
    result.and(cleanup)
}

/// Status of a machine that never had a VM is NotFound (by name, and by a made-up providerID if given).
pub async fn status_of_absent_vm_is_not_found(
    driver: &dyn Driver,
    fixture: &Fixture,
) -> Result<(), ConformanceFailure> {
    const CHECK: &str = STATUS_ABSENT;
    let request = fixture.request("absent", &fixture.class, None);
    err_with(CHECK, fixture, "status by machine name", driver.get_machine_status(&request).await, &[Code::NotFound])?;
    if let Some(id) = &fixture.absent_provider_id {
        let request = fixture.request("absent", &fixture.class, Some(id));
        err_with(CHECK, fixture, "status by providerID", driver.get_machine_status(&request).await, &[Code::NotFound])?;
    }
    Ok(())
}

/// `list_machines` of the class shows exactly the VMs created with it (compared with a list taken before), never
/// the other cluster's, and forgets deleted ones.
pub async fn list_is_scoped_to_cluster_and_role(
    driver: &dyn Driver,
    fixture: &Fixture,
) -> Result<(), ConformanceFailure> {
    const CHECK: &str = LIST_SCOPED;
    let (mine, theirs) = (fixture.list_request(&fixture.class), fixture.list_request(&fixture.other_cluster_class));
    let before = ok(CHECK, fixture, "list before", driver.list_machines(&mine).await)?;
    let before_other = ok(CHECK, fixture, "list of the other cluster before", driver.list_machines(&theirs).await)?;
    let here = fixture.request("list-here", &fixture.class, None);
    let there = fixture.request("list-there", &fixture.other_cluster_class, None);
    let a = ok(CHECK, fixture, "create in this cluster", driver.create_machine(&here).await)?;
    let b = driver.create_machine(&there).await;
    let result = async {
        let b = ok(CHECK, fixture, "create in the other cluster", b.clone())?;
        let after = ok(CHECK, fixture, "list", driver.list_machines(&mine).await)?;
        let mut want = before.clone();
        want.insert(a.provider_id.clone(), here.machine.name.clone());
        if after != want {
            return Err(fail(CHECK, format!("expected {}, got {}", show(&want), show(&after))));
        }
        let other = ok(CHECK, fixture, "list of the other cluster", driver.list_machines(&theirs).await)?;
        let mut want_other = before_other.clone();
        want_other.insert(b.provider_id.clone(), there.machine.name.clone());
        if other != want_other {
            return Err(fail(CHECK, format!("other cluster: expected {}, got {}", show(&want_other), show(&other))));
        }
        Ok(())
    }
    .await;
    let a_id = fixture.request("list-here", &fixture.class, Some(&a.provider_id));
    let mut cleanup = ok_or(CHECK, fixture, "clean-up delete", driver.delete_machine(&a_id).await, &[Code::NotFound]);
    if let Ok(b) = &b {
        let b_id = fixture.request("list-there", &fixture.other_cluster_class, Some(&b.provider_id));
        let deleted = driver.delete_machine(&b_id).await;
        cleanup = cleanup.and(ok_or(CHECK, fixture, "clean-up delete", deleted, &[Code::NotFound]));
    }
    result.and(cleanup)?;
    let after = ok(CHECK, fixture, "list after delete", driver.list_machines(&mine).await)?;
    if after.contains_key(&a.provider_id) {
        return Err(fail(CHECK, format!("the deleted VM {} is still listed", a.provider_id)));
    }
    Ok(())
}

fn show(map: &BTreeMap<String, String>) -> String {
    let entries: Vec<String> = map.iter().map(|(id, name)| format!("{id}={name}")).collect();
    format!("{{{}}}", entries.join(", "))
}

/// A second delete is Ok or NotFound; afterwards status is NotFound and list omits the VM. Deleting a machine that
/// never had a VM (no providerID) is Ok or NotFound too.
pub async fn delete_is_idempotent(driver: &dyn Driver, fixture: &Fixture) -> Result<(), ConformanceFailure> {
    const CHECK: &str = DELETE_IDEMPOTENT;
    let request = fixture.request("delete", &fixture.class, None);
    let created = ok(CHECK, fixture, "create", driver.create_machine(&request).await)?;
    let by_id = fixture.request("delete", &fixture.class, Some(&created.provider_id));
    ok(CHECK, fixture, "first delete", driver.delete_machine(&by_id).await)?;
    ok_or(CHECK, fixture, "second delete", driver.delete_machine(&by_id).await, &[Code::NotFound])?;
    err_with(
        CHECK,
        fixture,
        "status by providerID after delete",
        driver.get_machine_status(&by_id).await,
        &[Code::NotFound],
    )?;
    err_with(
        CHECK,
        fixture,
        "status by name after delete",
        driver.get_machine_status(&request).await,
        &[Code::NotFound],
    )?;
    let listed =
        ok(CHECK, fixture, "list after delete", driver.list_machines(&fixture.list_request(&fixture.class)).await)?;
    if listed.contains_key(&created.provider_id) {
        return Err(fail(CHECK, format!("the deleted VM {} is still listed", created.provider_id)));
    }
    let never = fixture.request("never-created", &fixture.class, None);
    ok_or(CHECK, fixture, "delete of a machine without VM", driver.delete_machine(&never).await, &[Code::NotFound])
}

/// A delete naming only the providerID (the safety controller's request for an orphan VM whose name tag is missing)
/// deletes that VM: afterwards status by providerID is NotFound and list omits it.
pub async fn delete_by_provider_id_needs_no_name(
    driver: &dyn Driver,
    fixture: &Fixture,
) -> Result<(), ConformanceFailure> {
    const CHECK: &str = DELETE_BY_PROVIDER_ID;
    let request = fixture.request("nameless", &fixture.class, None);
    let created = ok(CHECK, fixture, "create", driver.create_machine(&request).await)?;
    let mut nameless = fixture.request("nameless", &fixture.class, Some(&created.provider_id));
    nameless.machine.name.clear();
    let deleted = driver.delete_machine(&nameless).await;
    if deleted.is_err() {
        // Never leave a VM behind, even from a broken driver.
        let by_id = fixture.request("nameless", &fixture.class, Some(&created.provider_id));
        let _ = driver.delete_machine(&by_id).await;
    }
    ok(CHECK, fixture, "delete without a machine name", deleted)?;
    let by_id = fixture.request("nameless", &fixture.class, Some(&created.provider_id));
    err_with(CHECK, fixture, "status after delete", driver.get_machine_status(&by_id).await, &[Code::NotFound])?;
    let listed =
        ok(CHECK, fixture, "list after delete", driver.list_machines(&fixture.list_request(&fixture.class)).await)?;
    if listed.contains_key(&created.provider_id) {
        return Err(fail(CHECK, format!("the deleted VM {} is still listed", created.provider_id)));
    }
    Ok(())
}

/// An invalid providerSpec makes create and list fail with InvalidArgument naming the field.
pub async fn invalid_provider_spec_names_the_field(
    driver: &dyn Driver,
    fixture: &Fixture,
) -> Result<(), ConformanceFailure> {
    const CHECK: &str = INVALID_SPEC;
    let request = fixture.request("invalid", &fixture.invalid_class, None);
    let create = driver.create_machine(&request).await;
    if let Ok(created) = &create {
        // Never leave a VM behind, even from a broken driver.
        let by_id = fixture.request("invalid", &fixture.class, Some(&created.provider_id));
        let _ = driver.delete_machine(&by_id).await;
    }
    let list = driver.list_machines(&fixture.list_request(&fixture.invalid_class)).await;
    for (what, err) in [
        ("create", err_with(CHECK, fixture, "create", create, &[Code::InvalidArgument])?),
        ("list", err_with(CHECK, fixture, "list", list, &[Code::InvalidArgument])?),
    ] {
        if !err.message.contains(&fixture.invalid_field) {
            return Err(fail(
                CHECK,
                format!("{what}: the message {:?} does not name {:?}", err.message, fixture.invalid_field),
            ));
        }
    }
    Ok(())
}

/// A class of another provider is InvalidArgument for every per-class call.
pub async fn provider_mismatch_is_invalid_argument(
    driver: &dyn Driver,
    fixture: &Fixture,
) -> Result<(), ConformanceFailure> {
    const CHECK: &str = PROVIDER_MISMATCH;
    let class = &fixture.wrong_provider_class;
    let request = fixture.request("mismatch", class, None);
    let create = driver.create_machine(&request).await;
    if let Ok(created) = &create {
        let by_id = fixture.request("mismatch", &fixture.class, Some(&created.provider_id));
        let _ = driver.delete_machine(&by_id).await;
    }
    err_with(CHECK, fixture, "create", create, &[Code::InvalidArgument])?;
    let invalid = [Code::InvalidArgument];
    err_with(CHECK, fixture, "status", driver.get_machine_status(&request).await, &invalid)?;
    err_with(CHECK, fixture, "delete", driver.delete_machine(&request).await, &invalid)?;
    err_with(CHECK, fixture, "list", driver.list_machines(&fixture.list_request(class)).await, &invalid)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver, conformance_fixture};
    use crate::providers::{
        CreateMachineResponse, DeleteMachineResponse, GetVolumeIdsRequest, InitializeMachineResponse,
        MachineStatusResponse,
    };

    #[tokio::test]
    async fn the_in_memory_driver_conforms() {
        let driver = InMemoryDriver::new(InMemoryCloud::with_seed(1));
        run(&driver, &conformance_fixture()).await.unwrap();
        assert!(driver.cloud().live_vms().is_empty(), "the suite cleans up");
    }

    /// A driver that gets one thing wrong, chosen per test.
    #[derive(Default)]
    struct Broken {
        fault: &'static str,
        vms: Mutex<BTreeMap<String, String>>,
        next: Mutex<u32>,
    }

    #[async_trait::async_trait]
    impl Driver for Broken {
        fn provider(&self) -> &str {
            "InMemory"
        }

        async fn create_machine(&self, r: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
            if r.class.provider != "InMemory" && self.fault != "accepts other providers" {
                return Err(DriverError::new(Code::InvalidArgument, "wrong provider"));
            }
            if r.class.name == "invalid" && self.fault != "leaks secrets" {
                return Err(DriverError::new(Code::InvalidArgument, "providerSpec.bootJitter: bad"));
            }
            if r.class.name == "invalid" {
                return Err(DriverError::new(Code::InvalidArgument, format!("bad token {:?}", r.secret.text("token"))));
            }
            let mut vms = self.vms.lock().unwrap();
            let existing = vms.iter().find(|(_, n)| **n == r.machine.name).map(|(id, _)| id.clone());
            let id = match existing {
                Some(id) if self.fault != "create not idempotent" => id,
                _ => {
                    let mut next = self.next.lock().unwrap();
                    *next += 1;
                    format!("broken:///{next}")
                }
            };
            vms.insert(id.clone(), r.machine.name.clone());
            Ok(CreateMachineResponse { provider_id: id, node_name: r.machine.name.clone(), ..Default::default() })
        }

        async fn initialize_machine(&self, _: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
            Err(DriverError::new(Code::Unimplemented, ""))
        }

        async fn delete_machine(&self, r: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
            if r.class.provider != "InMemory" {
                return Err(DriverError::new(Code::InvalidArgument, "wrong provider"));
            }
            if r.machine.name.is_empty() && self.fault == "delete needs a name" {
                return Err(DriverError::new(Code::InvalidArgument, "the machine has no name"));
            }
            let mut vms = self.vms.lock().unwrap();
            match &r.machine.provider_id {
                Some(id) if self.fault == "second delete fails" && !vms.contains_key(id) => {
                    Err(DriverError::new(Code::Internal, "gone"))
                }
                Some(id) => {
                    vms.remove(id);
                    Ok(DeleteMachineResponse::default())
                }
                None => {
                    vms.retain(|_, n| *n != r.machine.name);
                    Ok(DeleteMachineResponse::default())
                }
            }
        }

        async fn get_machine_status(&self, r: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
            if r.class.provider != "InMemory" {
                return Err(DriverError::new(Code::InvalidArgument, "wrong provider"));
            }
            let vms = self.vms.lock().unwrap();
            let found = match &r.machine.provider_id {
                Some(id) => vms.get_key_value(id).map(|(id, n)| (id.clone(), n.clone())),
                None => vms.iter().find(|(_, n)| **n == r.machine.name).map(|(id, n)| (id.clone(), n.clone())),
            };
            match found {
                Some((provider_id, node_name)) => {
                    Ok(MachineStatusResponse { provider_id, node_name, ..Default::default() })
                }
                None if self.fault == "absent is internal" => Err(DriverError::new(Code::Internal, "dunno")),
                None => Err(DriverError::new(Code::NotFound, "none")),
            }
        }

        async fn list_machines(&self, r: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
            if r.class.provider != "InMemory" {
                return Err(DriverError::new(Code::InvalidArgument, "wrong provider"));
            }
            if r.class.name == "invalid" {
                return Err(DriverError::new(Code::InvalidArgument, "providerSpec.bootJitter: bad"));
            }
            // Not scoped by cluster, unless told to behave.
            let vms = self.vms.lock().unwrap().clone();
            if self.fault == "list not scoped" {
                return Ok(vms);
            }
            let suffix = if r.class.name == "elsewhere" { "-list-there" } else { "-list-here" };
            Ok(vms.into_iter().filter(|(_, n)| n.ends_with(suffix) || !n.contains("-list-")).collect())
        }

        async fn get_volume_ids(&self, _: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
            Ok(vec![])
        }
    }

    #[tokio::test]
    async fn broken_drivers_fail_the_named_check() {
        let cases = [
            ("create not idempotent", CREATE_IDEMPOTENT, "second create returned providerID"),
            ("absent is internal", STATUS_ABSENT, "expected NotFound, got Internal: dunno"),
            ("list not scoped", LIST_SCOPED, "expected {"),
            ("second delete fails", DELETE_IDEMPOTENT, "second delete: expected success or [NotFound], got Internal"),
            (
                "delete needs a name",
                DELETE_BY_PROVIDER_ID,
                "delete without a machine name: expected success, got InvalidArgument",
            ),
            ("leaks secrets", INVALID_SPEC, "shows the value of secret key \"token\""),
            ("accepts other providers", PROVIDER_MISMATCH, "create: expected InvalidArgument, got success"),
        ];
        let fixture = conformance_fixture();
        for (fault, check, detail) in cases {
            let driver = Broken { fault, ..Default::default() };
            let failure = run(&driver, &fixture).await.unwrap_err();
            assert_eq!(failure.check, check, "{fault}: {failure}");
            assert!(failure.detail.contains(detail), "{fault}: {failure}");
        }
        // And the well-behaved variant passes.
        run(&Broken::default(), &fixture).await.unwrap();
    }
}
