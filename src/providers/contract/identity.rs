//! Which VM a providerID names, across the spellings one cloud uses for the same VM. Controllers compare a
//! Machine's providerID with the providerIDs a driver lists or reports; a driver may write another spelling than
//! the one recorded on an older Machine, and the two must still count as one VM:
//!
//! | scheme | spellings of one VM | the VM |
//! |---|---|---|
//! | `aws` | `aws:///<region>/<id>` (MCM's AWS provider), `aws:///<zone>/<id>` (the cloud-controller, CAPA, this driver) | the instance ID |
//! | `gce` | `gce://<project>/<zone>/<name>`, `gce:///<project>/<zone>/<name>` | project, zone and name |
//! | `azure` | `azure:///subscriptions/…/virtualMachines/<vm>`, `azure:///<location>/<vm>` | the VM name (case-insensitive) |
//!
//! Pure and always compiled (no cloud SDK): the orphan collectors need it whichever drivers are built in.

/// The instance ID in an AWS providerID (`aws:///<region or zone>/<id>`), if it is one.
pub fn aws_instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    let valid = id.len() > 2 && id.starts_with("i-") && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    valid.then_some(id)
}

/// The zone a providerID names, where the cloud's spelling carries one: `aws:///<zone>/<id>` (a zone ends in a
/// letter, `eu-west-1a`; MCM's region form `aws:///eu-west-1/<id>` names none) and `gce://<project>/<zone>/<name>`.
/// Azure's providerIDs carry no zone.
pub fn zone(provider_id: &str) -> Option<&str> {
    if aws_instance_id(provider_id).is_some() {
        let rest = provider_id.strip_prefix("aws://")?.trim_start_matches('/');
        let (at, _) = rest.split_once('/')?;
        return at.ends_with(|c: char| c.is_ascii_lowercase()).then_some(at);
    }
    if let Some(rest) = provider_id.strip_prefix("gce://") {
        let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
        return match parts[..] {
            [_, zone, name] if !zone.is_empty() && !name.is_empty() => Some(zone),
            _ => None,
        };
    }
    None
}

/// What identifies the VM behind `provider_id`, equal for every spelling of one VM (see the module table);
/// other providerIDs are their own identity.
fn identity(provider_id: &str) -> String {
    if let Some(id) = aws_instance_id(provider_id) {
        return format!("aws:{id}");
    }
    if let Some(rest) = provider_id.strip_prefix("gce://") {
        return format!("gce:{}", rest.strip_prefix('/').unwrap_or(rest));
    }
    if let Some(rest) = provider_id.strip_prefix("azure://") {
        let vm = rest.rsplit('/').next().unwrap_or_default();
        if !vm.is_empty() && rest.contains('/') {
            return format!("azure:{}", vm.to_ascii_lowercase());
        }
    }
    provider_id.to_string()
}

/// Whether two providerIDs name the same VM.
pub fn same_vm(a: &str, b: &str) -> bool {
    a == b || identity(a) == identity(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_in_provider_ids() {
        let cases = [
            ("aws:///eu-west-1a/i-1", Some("eu-west-1a")),
            ("aws:///us-west-2-lax-1a/i-1", Some("us-west-2-lax-1a")),
            ("aws:///eu-west-1/i-1", None),
            ("aws:///eu-west-1a/vol-1", None),
            ("gce://p/europe-west1-b/m1", Some("europe-west1-b")),
            ("gce:///p/europe-west1-b/m1", Some("europe-west1-b")),
            ("gce://p/m1", None),
            ("azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/vm", None),
            ("", None),
        ];
        for (provider_id, want) in cases {
            assert_eq!(zone(provider_id), want, "{provider_id}");
        }
    }

    #[test]
    fn spellings_of_one_vm() {
        let cases = [
            ("identical", "aws:///eu-west-1/i-1", "aws:///eu-west-1/i-1", true),
            ("AWS region and zone form", "aws:///eu-west-1/i-1", "aws:///eu-west-1a/i-1", true),
            ("AWS zone form, other zone", "aws:///eu-west-1b/i-1", "aws:///eu-west-1a/i-1", true),
            ("AWS other instance", "aws:///eu-west-1/i-1", "aws:///eu-west-1a/i-2", false),
            ("AWS prefix of another ID", "aws:///eu-west-1/i-1", "aws:///eu-west-1a/i-10", false),
            ("AWS without an instance ID", "aws:///eu-west-1/", "aws:///eu-west-1a/", false),
            ("AWS and another cloud", "aws:///eu-west-1/i-1", "gce://p/z/i-1", false),
            ("GCE two and three slashes", "gce://p/europe-west1-b/m1", "gce:///p/europe-west1-b/m1", true),
            ("GCE other zone", "gce://p/europe-west1-b/m1", "gce://p/europe-west1-c/m1", false),
            (
                "Azure cloud-controller and Gardener's old form",
                "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/M1",
                "azure:///westeurope/m1",
                true,
            ),
            ("Azure other VM", "azure:///westeurope/m1", "azure:///westeurope/m2", false),
            ("in-memory, identical", "inmemory:///local-a/i-1", "inmemory:///local-a/i-1", true),
            ("in-memory, other zone", "inmemory:///local-a/i-1", "inmemory:///local-b/i-1", false),
            ("empty", "", "", true),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(same_vm(a, b), want, "{name}");
            assert_eq!(same_vm(b, a), want, "{name} (swapped)");
        }
    }

    #[test]
    fn aws_instance_ids() {
        assert_eq!(aws_instance_id("aws:///eu-west-1a/i-0123456789abcdef0"), Some("i-0123456789abcdef0"));
        assert_eq!(aws_instance_id("aws:///eu-west-1/i-1"), Some("i-1"));
        for bad in ["", "i-1", "gce:///x/i-1", "aws:///eu-west-1/", "aws:///eu-west-1/vol-1", "aws:///r/i-1?x"] {
            assert_eq!(aws_instance_id(bad), None, "{bad}");
        }
    }
}
