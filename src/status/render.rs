//! The renderings of a [`Report`]: the text tree (healthy siblings folded, colours on request) and the
//! `-o json|yaml` documents (the report as it is, nothing folded).

use std::time::Duration;

use jiff::Timestamp;

use super::explain::{Explanation, Severity};
use super::model::{DeploymentNode, Group, MachineNode, Report, SetNode};
use crate::lifecycle::clock;

/// How the text tree is drawn.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextOptions {
    /// Every machine and MachineSet on its own line, each machine with its VM and Node.
    pub show_all: bool,
    /// ANSI colours (only for a terminal).
    pub colour: bool,
}

/// An age as kubectl prints one: `45s`, `3m20s`, `12m`, `5h3m`, `2d4h`, `30d`, `2y`.
pub fn age(d: Duration) -> String {
    let seconds = d.as_secs();
    let minutes = seconds / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    let with = |big: u64, big_unit: &str, small: u64, small_unit: &str| match small {
        0 => format!("{big}{big_unit}"),
        small => format!("{big}{big_unit}{small}{small_unit}"),
    };
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 => with(minutes, "m", seconds % 60, "s"),
        _ if hours < 3 => format!("{minutes}m"),
        _ if hours < 8 => with(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if days < 8 => with(days, "d", hours % 24, "h"),
        _ if days < 2 * 365 => format!("{days}d"),
        _ if days < 8 * 365 => with(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// The explanation as one sentence, its deadline relative to `now`.
pub fn explanation_text(e: &Explanation, now: Timestamp) -> String {
    match &e.deadline {
        None => e.message.clone(),
        Some(d) if d.at.0 > now => {
            format!("{}; {} in {} ({})", e.message, d.event, age(clock::until(now, d.at.0)), d.timeout)
        }
        Some(d) => format!("{}; {} passed {} ago", e.message, d.timeout, age(clock::between(d.at.0, now))),
    }
}

/// The report as indented JSON.
pub fn json(report: &Report) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(report).map(|mut s| {
        s.push('\n');
        s
    })
}

/// The report as a YAML document.
pub fn yaml(report: &Report) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(report)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Tone {
    #[default]
    Plain,
    Good,
    Info,
    Warning,
    Error,
    Dim,
    Bold,
}

impl Tone {
    fn of(severity: Severity) -> Tone {
        match severity {
            Severity::Info => Tone::Info,
            Severity::Warning => Tone::Warning,
            Severity::Error => Tone::Error,
        }
    }

    fn code(self) -> Option<&'static str> {
        match self {
            Tone::Plain => None,
            Tone::Good => Some("\x1b[32m"),
            Tone::Info => Some("\x1b[36m"),
            Tone::Warning => Some("\x1b[33m"),
            Tone::Error => Some("\x1b[31m"),
            Tone::Dim => Some("\x1b[2m"),
            Tone::Bold => Some("\x1b[1m"),
        }
    }
}

/// One row of the table, before the tree prefix is known.
#[derive(Clone, Debug, Default)]
struct Row {
    name: String,
    name_tone: Tone,
    ready: String,
    status: String,
    status_tone: Tone,
    operation: String,
    since: String,
    message: String,
    message_tone: Tone,
}

/// A row and the rows below it.
struct Item {
    row: Row,
    children: Vec<Item>,
}

struct Draw<'a> {
    now: Timestamp,
    options: &'a TextOptions,
}

fn ago(now: Timestamp, at: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    at.map(|t| age(clock::between(t.0, now))).unwrap_or_default()
}

impl Draw<'_> {
    fn explained(&self, row: &mut Row, explanation: Option<&Explanation>) {
        if let Some(e) = explanation {
            row.message = explanation_text(e, self.now);
            row.message_tone = Tone::of(e.severity);
            row.status_tone = Tone::of(e.severity);
            row.since = ago(self.now, e.since.as_ref());
        }
    }

    fn deployment(&self, d: &DeploymentNode) -> Item {
        let mut row = Row {
            name: format!("MachineDeployment/{}", d.name),
            ready: format!("{}/{}", d.counts.ready, d.counts.desired),
            status: d.status.clone(),
            status_tone: if d.status == "Available" { Tone::Good } else { Tone::Plain },
            ..Row::default()
        };
        self.explained(&mut row, d.explanation.as_ref());
        Item { row, children: self.sets(&d.machine_sets) }
    }

    /// Sets, the empty and healthy ones folded into one line when there are two or more.
    fn sets(&self, sets: &[SetNode]) -> Vec<Item> {
        let empty = |s: &&SetNode| {
            s.counts.desired == 0 && s.counts.replicas == 0 && s.machines.is_empty() && s.explanation.is_none()
        };
        let folded = sets.iter().filter(empty).count();
        if self.options.show_all || folded < 2 {
            return sets.iter().map(|s| self.set(s)).collect();
        }
        let mut items: Vec<Item> = sets.iter().filter(|s| !empty(s)).map(|s| self.set(s)).collect();
        items.push(Item {
            row: Row {
                name: format!("{folded} MachineSets at 0 replicas"),
                name_tone: Tone::Dim,
                ready: "0/0".into(),
                status: "Empty".into(),
                ..Row::default()
            },
            children: Vec::new(),
        });
        items
    }

    fn set(&self, s: &SetNode) -> Item {
        let mut row = Row {
            name: format!("MachineSet/{}", s.name),
            ready: format!("{}/{}", s.counts.ready, s.counts.desired),
            status: s.status.clone(),
            status_tone: if s.status == "Available" { Tone::Good } else { Tone::Plain },
            ..Row::default()
        };
        self.explained(&mut row, s.explanation.as_ref());
        Item { row, children: self.machines(&s.machines) }
    }

    /// Machines, the healthy ones folded into one line when there are two or more.
    fn machines(&self, machines: &[MachineNode]) -> Vec<Item> {
        let healthy: Vec<&MachineNode> = machines.iter().filter(|m| m.healthy).collect();
        if self.options.show_all || healthy.len() < 2 {
            return machines.iter().map(|m| self.machine(m)).collect();
        }
        let mut items: Vec<Item> = machines.iter().filter(|m| !m.healthy).map(|m| self.machine(m)).collect();
        let operations: Vec<String> = healthy.iter().map(|m| operation(m)).collect();
        let newest =
            healthy.iter().filter_map(|m| m.last_operation.as_ref()?.last_update_time.as_ref()).max_by_key(|t| t.0);
        let n = healthy.len();
        items.push(Item {
            row: Row {
                name: format!("{n} healthy Machines"),
                name_tone: Tone::Dim,
                ready: format!("{n}/{n}"),
                status: "Running".into(),
                status_tone: Tone::Good,
                operation: if operations.iter().all(|o| *o == operations[0]) {
                    operations[0].clone()
                } else {
                    String::new()
                },
                since: ago(self.now, newest),
                ..Row::default()
            },
            children: Vec::new(),
        });
        items
    }

    fn machine(&self, m: &MachineNode) -> Item {
        let mut row = Row {
            name: format!("Machine/{}", m.name),
            ready: if m.ready { "1/1" } else { "0/1" }.into(),
            status: m.phase.clone().unwrap_or_else(|| "Creating".into()),
            status_tone: if m.healthy { Tone::Good } else { Tone::Plain },
            operation: operation(m),
            ..Row::default()
        };
        self.explained(&mut row, m.explanation.as_ref());
        row.since = ago(self.now, m.last_operation.as_ref().and_then(|o| o.last_update_time.as_ref()));
        let children = match self.options.show_all || !m.healthy {
            true => self.vm_and_node(m),
            false => Vec::new(),
        };
        Item { row, children }
    }

    fn vm_and_node(&self, m: &MachineNode) -> Vec<Item> {
        let mut items = Vec::new();
        // The VM's ID; the machine's own line already says what is wrong with it.
        let message = m.vm.provider_id.clone().unwrap_or_else(|| "no VM yet".into());
        let vm = match &m.vm.mcm_machine {
            Some(name) => {
                let (status, tone) = match &m.vm.ready {
                    Some(c) if c.status == "True" => ("Ready".to_string(), Tone::Good),
                    Some(c) => (c.reason.clone().unwrap_or_else(|| "NotReady".into()), Tone::Warning),
                    None => ("Unknown".to_string(), Tone::Plain),
                };
                Row { name: format!("MCMMachine/{name}"), status, status_tone: tone, message, ..Row::default() }
            }
            None => Row { name: "VM".into(), message, ..Row::default() },
        };
        items.push(Item { row: vm, children: Vec::new() });
        if let Some(node) = &m.node {
            let (mut status, tone) = match node.ready.as_str() {
                "True" => ("Ready".to_string(), Tone::Good),
                "False" => ("NotReady".to_string(), Tone::Warning),
                other => (other.to_string(), Tone::Warning),
            };
            if node.unschedulable {
                status.push_str(",SchedulingDisabled");
            }
            let message = match node.source.as_str() {
                "Node" => "",
                "Missing" => "not found; as the Machine's status records it",
                _ => "as the Machine's status records it (Nodes not read)",
            };
            let message = message.to_string();
            let row = Row { name: format!("Node/{}", node.name), status, status_tone: tone, message, ..Row::default() };
            items.push(Item { row, children: Vec::new() });
        }
        items
    }

    fn group(&self, g: &Group) -> Vec<Item> {
        let mut items: Vec<Item> = g.machine_deployments.iter().map(|d| self.deployment(d)).collect();
        items.extend(g.machine_sets.iter().map(|s| self.set(s)));
        items.extend(g.machines.iter().map(|m| self.machine(m)));
        items
    }
}

/// `Create Successful`: a machine's last operation.
fn operation(m: &MachineNode) -> String {
    let Some(op) = &m.last_operation else {
        return String::new();
    };
    [op.type_.as_deref(), op.state.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" ")
}

/// A table line: the tree prefix and the row.
struct Line {
    prefix: String,
    row: Row,
}

fn flatten(items: Vec<Item>, prefix: &str, root: bool, out: &mut Vec<Line>) {
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let last = i + 1 == n;
        let (branch, below) = match (root, last) {
            (true, _) => ("", ""),
            (false, true) => ("└─", "  "),
            (false, false) => ("├─", "│ "),
        };
        out.push(Line { prefix: format!("{prefix}{branch}"), row: item.row });
        flatten(item.children, &format!("{prefix}{below}"), false, out);
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn paint(text: &str, tone: Tone, colour: bool) -> String {
    match (colour, tone.code()) {
        (true, Some(code)) if !text.is_empty() => format!("{code}{text}\x1b[0m"),
        _ => text.to_string(),
    }
}

/// The text tree: per group a title line (`namespace (API group[, Cluster name])`), a header and one line per
/// object, groups separated by an empty line.
pub fn text(report: &Report, options: &TextOptions) -> String {
    let draw = Draw { now: report.now.0, options };
    let mut out = String::new();
    for (i, group) in report.groups.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let title = match &group.cluster {
            Some(cluster) => format!("{} ({}, Cluster {cluster})", group.namespace, group.api_group),
            None => format!("{} ({})", group.namespace, group.api_group),
        };
        out.push_str(&paint(&title, Tone::Bold, options.colour));
        out.push('\n');
        let mut lines = Vec::new();
        flatten(draw.group(group), "", true, &mut lines);
        let header = Row {
            name: "NAME".into(),
            ready: "READY".into(),
            status: "STATUS".into(),
            operation: "LAST OPERATION".into(),
            since: "SINCE".into(),
            message: "MESSAGE".into(),
            ..Row::default()
        };
        let header = Line { prefix: String::new(), row: header };
        let all: Vec<&Line> = std::iter::once(&header).chain(lines.iter()).collect();
        let w_name = all.iter().map(|l| width(&l.prefix) + width(&l.row.name)).max().unwrap_or(0);
        let w_ready = all.iter().map(|l| width(&l.row.ready)).max().unwrap_or(0);
        let w_status = all.iter().map(|l| width(&l.row.status)).max().unwrap_or(0);
        let w_op = all.iter().map(|l| width(&l.row.operation)).max().unwrap_or(0);
        let w_since = all.iter().map(|l| width(&l.row.since)).max().unwrap_or(0);
        for line in all {
            let r = &line.row;
            let cell = |text: &str, tone: Tone, w: usize| {
                format!("{}{}", paint(text, tone, options.colour), " ".repeat(w.saturating_sub(width(text))))
            };
            let mut text = format!(
                "{}{}  {}  {}  {}  {}  {}",
                line.prefix,
                cell(&r.name, r.name_tone, w_name - width(&line.prefix)),
                cell(&r.ready, Tone::Plain, w_ready),
                cell(&r.status, r.status_tone, w_status),
                cell(&r.operation, Tone::Plain, w_op),
                cell(&r.since, Tone::Plain, w_since),
                paint(&r.message, r.message_tone, options.colour),
            );
            text.truncate(text.trim_end().len());
            out.push_str(&text);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::status::explain::Deadline;
    use crate::status::model::{Counts, NodeState, Operation, Vm};

    fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn ages_read_like_kubectls() {
        let cases = [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (730 * 86400, "2y"),
            (731 * 86400, "2y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, text) in cases {
            assert_eq!(age(Duration::from_secs(seconds)), text, "{seconds}");
        }
    }

    #[test]
    fn a_deadline_reads_as_time_left_or_time_past() {
        let e = |at: &str| Explanation {
            severity: Severity::Warning,
            reason: "Unhealthy".into(),
            message: "unhealthy".into(),
            since: None,
            deadline: Some(Deadline {
                at: Time(at.parse().unwrap()),
                event: "Failed".into(),
                timeout: "health timeout".into(),
            }),
        };
        assert_eq!(explanation_text(&e("2025-06-01T12:06:00Z"), now()), "unhealthy; Failed in 6m (health timeout)");
        assert_eq!(explanation_text(&e("2025-06-01T11:58:00Z"), now()), "unhealthy; health timeout passed 2m ago");
    }

    fn machine(name: &str, healthy: bool) -> MachineNode {
        MachineNode {
            name: name.into(),
            phase: Some(if healthy { "Running" } else { "Failed" }.into()),
            ready: healthy,
            healthy,
            last_operation: Some(Operation {
                type_: Some("Create".into()),
                state: Some(if healthy { "Successful" } else { "Failed" }.into()),
                description: None,
                error_code: None,
                last_update_time: Some(Time("2025-06-01T11:00:00Z".parse().unwrap())),
            }),
            vm: Vm { provider_id: Some(format!("inmemory:///{name}")), ..Default::default() },
            node: Some(NodeState {
                name: name.into(),
                ready: "True".into(),
                unschedulable: false,
                source: "Node".into(),
            }),
            explanation: (!healthy).then(|| Explanation {
                severity: Severity::Error,
                reason: "Failed".into(),
                message: "it broke".into(),
                since: None,
                deadline: None,
            }),
        }
    }

    fn report(machines: Vec<MachineNode>, empty_sets: usize) -> Report {
        let set = |name: String, machines: Vec<MachineNode>, desired: i32| SetNode {
            name,
            revision: None,
            counts: Counts { desired, replicas: desired, ready: desired, available: desired, up_to_date: None },
            status: if desired == 0 { "Empty" } else { "Available" }.into(),
            explanation: None,
            machines,
        };
        let mut sets = vec![set("s-new".into(), machines, 3)];
        sets.extend((0..empty_sets).map(|i| set(format!("s-old-{i}"), Vec::new(), 0)));
        Report {
            now: Time(now()),
            groups: vec![Group {
                namespace: "ns".into(),
                api_group: "machine.sapcloud.io".into(),
                cluster: None,
                machine_deployments: vec![DeploymentNode {
                    name: "d".into(),
                    counts: Counts { desired: 3, replicas: 3, ready: 2, available: 2, up_to_date: Some(3) },
                    status: "Available".into(),
                    explanation: None,
                    machine_sets: sets,
                }],
                machine_sets: Vec::new(),
                machines: Vec::new(),
            }],
        }
    }

    #[test]
    fn healthy_siblings_fold_and_show_all_unfolds_them() {
        let r = report(vec![machine("a", true), machine("b", false), machine("c", true)], 2);
        let folded = text(&r, &TextOptions::default());
        assert_eq!(
            folded,
            "\
ns (machine.sapcloud.io)
NAME                           READY  STATUS     LAST OPERATION     SINCE  MESSAGE
MachineDeployment/d            2/3    Available
├─MachineSet/s-new             3/3    Available
│ ├─Machine/b                  0/1    Failed     Create Failed      60m    it broke
│ │ ├─VM                                                                   inmemory:///b
│ │ └─Node/b                          Ready
│ └─2 healthy Machines         2/2    Running    Create Successful  60m
└─2 MachineSets at 0 replicas  0/0    Empty
"
        );
        let all = text(&r, &TextOptions { show_all: true, colour: false });
        assert_eq!(all.lines().filter(|l| l.contains("Machine/")).count(), 3);
        assert_eq!(all.lines().filter(|l| l.contains("MachineSet/s-old")).count(), 2);
        assert!(!all.contains("healthy Machines"));
    }

    #[test]
    fn one_healthy_machine_or_one_empty_set_is_not_folded() {
        let r = report(vec![machine("a", true)], 1);
        let out = text(&r, &TextOptions::default());
        assert!(out.contains("└─Machine/a"), "{out}");
        assert!(out.contains("MachineSet/s-old-0"), "{out}");
        assert!(!out.contains("VM"), "a healthy machine hides its VM and Node: {out}");
    }

    #[test]
    fn colours_only_when_asked() {
        let r = report(vec![machine("b", false)], 0);
        assert!(!text(&r, &TextOptions::default()).contains('\x1b'));
        let coloured = text(&r, &TextOptions { show_all: false, colour: true });
        assert!(coloured.contains("\x1b[31mit broke\x1b[0m"), "{coloured}");
        assert!(coloured.contains("\x1b[32mAvailable\x1b[0m"), "{coloured}");
    }
}
