//! What no real API server gives a test: request counters by verb and resource, and fault injection (failed
//! requests, added latency). Closing every open watch is [`super::ApiServer::close_watches`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::error::ApiError;

/// A request's verb as kube-apiserver names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// The lower-case name (`get`, `deletecollection` ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// The verb of a request from its method, whether it names an object, and `watch=true`.
    pub fn of(method: &str, named: bool, watch: bool) -> Option<Verb> {
        Some(match (method, named) {
            ("GET", true) => Verb::Get,
            ("GET", false) if watch => Verb::Watch,
            ("GET", false) => Verb::List,
            ("POST", _) => Verb::Create,
            ("PUT", _) => Verb::Update,
            ("PATCH", _) => Verb::Patch,
            ("DELETE", true) => Verb::Delete,
            ("DELETE", false) => Verb::DeleteCollection,
            _ => return None,
        })
    }
}

/// Which requests a fault applies to: `None` matches any verb or resource. The resource is the plural
/// (`machines`), optionally qualified by group (`machines.machine.sapcloud.io`) or with a subresource
/// (`machines/status`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// The verb, or any.
    pub verb: Option<Verb>,
    /// The resource, or any.
    pub resource: Option<String>,
}

impl Selector {
    /// Every request.
    pub fn any() -> Self {
        Selector::default()
    }

    /// Requests of one verb on one resource.
    pub fn new(verb: Option<Verb>, resource: Option<&str>) -> Self {
        Selector { verb, resource: resource.map(str::to_string) }
    }

    fn matches(&self, request: &RequestInfo) -> bool {
        self.verb.is_none_or(|v| v == request.verb)
            && self.resource.as_deref().is_none_or(|r| {
                let qualified = if request.group.is_empty() {
                    request.resource.clone()
                } else {
                    format!("{}.{}", request.resource, request.group)
                };
                match &request.subresource {
                    Some(sub) => r == format!("{}/{sub}", request.resource) || r == format!("{qualified}/{sub}"),
                    None => r == request.resource || r == qualified,
                }
            })
    }
}

/// How often a failure fires.
#[derive(Clone, Debug, PartialEq)]
enum Trigger {
    Next(u32),
    Share(f64),
}

#[derive(Clone, Debug, PartialEq)]
struct Failure {
    selector: Selector,
    trigger: Trigger,
    code: u16,
}

/// The request being served, as faults and counters see it.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// The verb.
    pub verb: Verb,
    /// API group.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, if any.
    pub subresource: Option<String>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    code: String,
}

/// Request counters (exported as Prometheus text on `/metrics`) and the injected faults.
pub struct Faults {
    failures: Mutex<Vec<Failure>>,
    latencies: Mutex<Vec<(Selector, Duration)>>,
    /// Resources (plural) whose watches deliver each event late, by this much.
    watch_lags: Mutex<Vec<(String, Duration)>>,
    /// Until when every resource request waits (a server that stopped answering).
    paused_until: Mutex<Option<Instant>>,
    /// Draws for shares of failures; seeded for reproducible runs, from entropy otherwise.
    rng: Mutex<StdRng>,
    /// Requests failed on purpose so far.
    injected: AtomicU64,
    requests: Family<RequestLabels, Counter>,
    counts: Mutex<BTreeMap<(String, String), u64>>,
    by_group: Mutex<BTreeMap<(String, String, String), u64>>,
    watches: Gauge,
    registry: Registry,
}

impl Default for Faults {
    fn default() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let watches = Gauge::default();
        let mut registry = Registry::default();
        registry.register("apiserver_request", "Requests served, by verb, resource and HTTP code", requests.clone());
        registry.register("apiserver_registered_watchers", "Watches currently open", watches.clone());
        Faults {
            failures: Mutex::new(Vec::new()),
            latencies: Mutex::new(Vec::new()),
            watch_lags: Mutex::new(Vec::new()),
            paused_until: Mutex::new(None),
            rng: Mutex::new(StdRng::from_os_rng()),
            injected: AtomicU64::new(0),
            requests,
            counts: Mutex::new(BTreeMap::new()),
            by_group: Mutex::new(BTreeMap::new()),
            watches,
            registry,
        }
    }
}

fn injected(code: u16) -> ApiError {
    match code {
        409 => ApiError::with_code(
            409,
            "Conflict",
            "injected fault: the object has been modified; please apply your changes to the latest version and try again",
        ),
        429 => ApiError::too_many_requests(),
        500 => ApiError::internal("injected fault: internal error"),
        503 => ApiError::unavailable("injected fault: the server is currently unable to handle the request"),
        504 => ApiError::with_code(
            504,
            "Timeout",
            "injected fault: the server was unable to return a response in the time allotted",
        ),
        other => ApiError::with_code(other, "InternalError", format!("injected fault: status {other}")),
    }
}

impl Faults {
    /// The next `count` requests matching `selector` fail with `code` (409, 429, 500, 503 ...).
    pub fn fail_next(&self, selector: Selector, count: u32, code: u16) {
        lock(&self.failures).push(Failure { selector, trigger: Trigger::Next(count), code });
    }

    /// A share (0.0–1.0) of the requests matching `selector` fail with `code`, until cleared.
    pub fn fail_share(&self, selector: Selector, share: f64, code: u16) {
        lock(&self.failures).push(Failure { selector, trigger: Trigger::Share(share.clamp(0.0, 1.0)), code });
    }

    /// Requests matching `selector` wait `delay` before being served.
    pub fn add_latency(&self, selector: Selector, delay: Duration) {
        lock(&self.latencies).push((selector, delay));
    }

    /// Watches of `resource` (plural, e.g. `machines`) deliver every event `delay` late: a lagging watch, whose
    /// client's cache shows other kinds' changes before this one's (what a busy real server does at times).
    pub fn lag_watches(&self, resource: &str, delay: Duration) {
        lock(&self.watch_lags).push((resource.to_string(), delay));
    }

    /// How late watches of `resource` deliver their events.
    pub fn watch_lag(&self, resource: &str) -> Duration {
        lock(&self.watch_lags).iter().filter(|(r, _)| r == resource).map(|(_, d)| *d).max().unwrap_or_default()
    }

    /// Seeds the draws of [`Faults::fail_share`], so that a run with the same requests in the same order fails
    /// the same ones.
    pub fn seed(&self, seed: u64) {
        *lock(&self.rng) = StdRng::seed_from_u64(seed);
    }

    /// Every resource request arriving before `now + length` waits until then: a server that stops answering
    /// (requests hang rather than fail). Close the watches as well for watches to stall too.
    pub fn pause(&self, length: Duration) {
        *lock(&self.paused_until) = Some(Instant::now() + length);
    }

    /// How many requests were failed on purpose so far (never reset).
    pub fn injected_failures(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Removes every injected fault, latency, watch lag and pause.
    pub fn clear(&self) {
        lock(&self.failures).clear();
        lock(&self.latencies).clear();
        lock(&self.watch_lags).clear();
        *lock(&self.paused_until) = None;
    }

    /// The injected delay and failure for a request, if any (consumes one of a "next N" failure).
    pub fn decide(&self, request: &RequestInfo) -> (Duration, Option<ApiError>) {
        let latency =
            lock(&self.latencies).iter().filter(|(s, _)| s.matches(request)).map(|(_, d)| *d).max().unwrap_or_default();
        let paused = lock(&self.paused_until).map(|until| until.saturating_duration_since(Instant::now()));
        let delay = latency.max(paused.unwrap_or_default());
        let mut failures = lock(&self.failures);
        let mut fail = None;
        for failure in failures.iter_mut().filter(|f| f.selector.matches(request)) {
            let fires = match &mut failure.trigger {
                Trigger::Next(0) => false,
                Trigger::Next(n) => {
                    *n -= 1;
                    true
                }
                Trigger::Share(share) => lock(&self.rng).random::<f64>() < *share,
            };
            if fires {
                self.injected.fetch_add(1, Ordering::Relaxed);
                fail = Some(injected(failure.code));
                break;
            }
        }
        failures.retain(|f| f.trigger != Trigger::Next(0));
        (delay, fail)
    }

    /// Counts a served request.
    pub fn count(&self, request: &RequestInfo, code: u16) {
        let labels = RequestLabels {
            verb: request.verb.as_str().into(),
            group: request.group.clone(),
            resource: request.resource.clone(),
            subresource: request.subresource.clone().unwrap_or_default(),
            code: code.to_string(),
        };
        self.requests.get_or_create(&labels).inc();
        let resource = match &request.subresource {
            Some(sub) => format!("{}/{sub}", request.resource),
            None => request.resource.clone(),
        };
        *lock(&self.by_group)
            .entry((request.verb.as_str().to_string(), request.group.clone(), resource.clone()))
            .or_default() += 1;
        *lock(&self.counts).entry((request.verb.as_str().to_string(), resource)).or_default() += 1;
    }

    /// Every counter with its API group: `(verb, group, resource)` -> count (`resource` may be
    /// `plural/subresource`; the core group is ""). What an RBAC audit compares with a role's rules.
    pub fn request_counts_by_group(&self) -> BTreeMap<(String, String, String), u64> {
        lock(&self.by_group).clone()
    }

    /// How many requests of `verb` on `resource` (plural, or `plural/subresource`) were served.
    pub fn request_count(&self, verb: Verb, resource: &str) -> u64 {
        lock(&self.counts).get(&(verb.as_str().to_string(), resource.to_string())).copied().unwrap_or(0)
    }

    /// Every counter: `(verb, resource)` -> count.
    pub fn request_counts(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.counts).clone()
    }

    /// Sum of all counters.
    pub fn total_requests(&self) -> u64 {
        lock(&self.counts).values().sum()
    }

    /// Resets the counters (the Prometheus counters keep counting, as counters must).
    pub fn reset_counts(&self) {
        lock(&self.counts).clear();
        lock(&self.by_group).clear();
    }

    /// Keeps the open-watch gauge current.
    pub fn set_open_watches(&self, open: usize) {
        self.watches.set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Prometheus text exposition of the counters.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(verb: Verb, group: &str, resource: &str, sub: Option<&str>) -> RequestInfo {
        RequestInfo { verb, group: group.into(), resource: resource.into(), subresource: sub.map(Into::into) }
    }

    #[test]
    fn selectors_match_plain_qualified_and_subresources() {
        let r = req(Verb::Update, "machine.sapcloud.io", "machines", Some("status"));
        let cases = [
            (Selector::any(), true),
            (Selector::new(Some(Verb::Update), None), true),
            (Selector::new(Some(Verb::Patch), None), false),
            (Selector::new(None, Some("machines/status")), true),
            (Selector::new(None, Some("machines.machine.sapcloud.io/status")), true),
            (Selector::new(None, Some("machines")), false),
        ];
        for (selector, expected) in cases {
            assert_eq!(selector.matches(&r), expected, "{selector:?}");
        }
    }

    #[test]
    fn next_n_failures_are_consumed_in_order() {
        let f = Faults::default();
        f.fail_next(Selector::new(Some(Verb::Create), Some("pods")), 2, 503);
        let create = req(Verb::Create, "", "pods", None);
        let get = req(Verb::Get, "", "pods", None);
        assert!(f.decide(&get).1.is_none());
        assert_eq!(f.decide(&create).1.unwrap().code, 503);
        assert_eq!(f.decide(&create).1.unwrap().code, 503);
        assert!(f.decide(&create).1.is_none());
        assert_eq!(f.injected_failures(), 2);
    }

    #[test]
    fn shares_fail_about_that_often() {
        let f = Faults::default();
        f.fail_share(Selector::any(), 0.5, 500);
        let r = req(Verb::List, "", "nodes", None);
        let failed = (0..2000).filter(|_| f.decide(&r).1.is_some()).count();
        assert!((800..1200).contains(&failed), "{failed}");
        f.clear();
        assert!(f.decide(&r).1.is_none());
    }

    #[test]
    fn seeded_shares_fail_the_same_requests() {
        let draws = |seed| {
            let f = Faults::default();
            f.seed(seed);
            f.fail_share(Selector::any(), 0.3, 500);
            let r = req(Verb::Patch, "", "nodes", None);
            (0..64).map(|_| f.decide(&r).1.is_some()).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
    }

    #[test]
    fn a_pause_delays_every_request_until_it_ends_and_clear_lifts_it() {
        let f = Faults::default();
        let r = req(Verb::Get, "", "nodes", None);
        assert_eq!(f.decide(&r).0, Duration::ZERO);
        f.pause(Duration::from_secs(60));
        let (delay, failure) = f.decide(&r);
        assert!(delay > Duration::from_secs(59) && delay <= Duration::from_secs(60), "{delay:?}");
        assert!(failure.is_none());
        f.clear();
        assert_eq!(f.decide(&r).0, Duration::ZERO);
    }

    #[test]
    fn counters_count_and_export() {
        let f = Faults::default();
        f.count(&req(Verb::List, "", "nodes", None), 200);
        f.count(&req(Verb::List, "", "nodes", None), 200);
        assert_eq!(f.request_count(Verb::List, "nodes"), 2);
        let text = f.metrics_text();
        assert!(
            text.contains(
                "apiserver_request_total{verb=\"list\",group=\"\",resource=\"nodes\",subresource=\"\",code=\"200\"} 2"
            ),
            "{text}"
        );
    }
}
