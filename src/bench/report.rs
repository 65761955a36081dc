//! The machines benchmark's report: the figures, and the targets of issue #25 beside them with a verdict, as text
//! (aligned tables) or as one JSON document (`--json`). Pure functions of the figures, so they are tested without
//! running anything.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::machines::{MachinesBench, PROBE_WRITERS, PROBE_WRITES, PhaseFigures, RunFigures, mib};
use super::process::{ProcessConfig, ProcessMemory};
use crate::lifecycle::safety::SafetyConfig;

/// The fewest API writes that take one machine from nothing to Running: create the Machine; one patch of its
/// metadata (finalizer and `providerID` together, once the VM exists); its status to Pending (the VM is
/// created, the node is not Ready yet); its status to Running (the node joined). Fewer is not possible: the
/// finalizer must be on before the VM exists (or a deletion could leak it), and Pending and Running are two
/// observable states apart by a boot. The Node, its status and the set's and deployment's counters are left out:
/// the kubelet writes the former, and the latter are shared by many machines.
pub(super) const MIN_WRITES_PER_MACHINE: u64 = 4;

/// The MachineClasses of the benchmark (one, `instant`): cloud calls at rest are allowed per class.
const BENCH_CLASSES: u64 = 1;

/// The memory target's size: `mcm run` with this many Running machines.
const MEMORY_TARGET_MACHINES: usize = 10_000;

/// The lower bound of "N machines to Running" in this run: no run can be faster than the server takes for the
/// minimal writes of every machine (at the probe's measured time per write), nor than one boot.
pub(super) fn lower_bound(machines: usize, write_time: Duration, boot: Duration) -> Duration {
    let writes = MIN_WRITES_PER_MACHINE.saturating_mul(machines as u64);
    boot.max(write_time.saturating_mul(u32::try_from(writes).unwrap_or(u32::MAX)))
}

/// The ideal rolling update: `ceil(100 / maxSurge%)` waves (`maxUnavailable` 0), each one boot long; `None`
/// without a surge.
pub(super) fn ideal_roll(surge_percent: u32, boot: Duration) -> Option<Duration> {
    (surge_percent > 0).then(|| boot.saturating_mul(100u32.div_ceil(surge_percent)))
}

/// How a figure compares with its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(super) enum Verdict {
    #[serde(rename = "pass")]
    Pass,
    #[serde(rename = "miss")]
    Miss,
    /// This run cannot tell (no boot time, no rest, too few machines, not in its own process).
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl Verdict {
    fn of(pass: bool) -> Verdict {
        if pass { Verdict::Pass } else { Verdict::Miss }
    }

    fn text(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Miss => "MISS",
            Verdict::NotApplicable => "n/a",
        }
    }
}

/// One row of the targets table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(super) struct Target {
    /// What is measured, with its definition.
    pub name: String,
    /// The figure compared with `limit`, when this run has one.
    pub measured: Option<f64>,
    /// The figure as the table shows it.
    pub shown: String,
    /// The target as the table shows it.
    pub target: String,
    /// The number `measured` must not exceed.
    pub limit: Option<f64>,
    pub verdict: Verdict,
}

/// What `mcm bench machines` reports (without `--peer`).
#[derive(Clone, Debug)]
pub struct MachinesReport {
    pub(super) sizes: MachinesBench,
    /// Where the controllers ran: this process (`None`) or their own.
    pub(super) own_process: Option<ProcessConfig>,
    pub(super) figures: RunFigures,
}

fn ratio_row(name: String, measured: Duration, bound: Option<Duration>, limit: f64, why_not: &str) -> Target {
    let target = format!("<= {limit}x");
    match bound.filter(|b| !b.is_zero()) {
        Some(bound) => {
            let ratio = measured.as_secs_f64() / bound.as_secs_f64();
            Target {
                name,
                measured: Some(ratio),
                shown: format!("{ratio:.2}x ({:.2} s / {:.2} s)", measured.as_secs_f64(), bound.as_secs_f64()),
                target,
                limit: Some(limit),
                verdict: Verdict::of(ratio <= limit),
            }
        }
        None => Target {
            name,
            measured: None,
            shown: why_not.to_string(),
            target,
            limit: Some(limit),
            verdict: Verdict::NotApplicable,
        },
    }
}

/// A row whose phase this run left out (`--no-rolling-update`).
fn not_run(name: String, target: String, limit: f64) -> Target {
    Target {
        name,
        measured: None,
        shown: "n/a (--no-rolling-update)".into(),
        target,
        limit: Some(limit),
        verdict: Verdict::NotApplicable,
    }
}

fn at_most_row(name: String, measured: f64, shown: String, limit: f64, target: String) -> Target {
    Target {
        name,
        measured: Some(measured),
        shown,
        target,
        limit: Some(limit),
        verdict: Verdict::of(measured <= limit),
    }
}

/// `mcm run`'s peak at the end of the last phase.
fn mcm_run_peak(phase: &PhaseFigures) -> Option<u64> {
    phase.memory.iter().filter(|m| m.process == "mcm run").find_map(|m| m.peak_bytes)
}

impl MachinesReport {
    fn last_phase(&self) -> &PhaseFigures {
        let f = &self.figures;
        f.rest.as_ref().or(f.roll.as_ref()).unwrap_or(&f.create)
    }

    /// The targets of issue #25 beside this run's figures.
    pub(super) fn targets(&self) -> Vec<Target> {
        let sizes = &self.sizes;
        let f = &self.figures;
        let n = sizes.machines;
        let mut rows = Vec::new();
        rows.push(ratio_row(
            format!(
                "{n} machines to Running / lower bound: max(boot, {n} x {MIN_WRITES_PER_MACHINE} writes x {:.1} µs)",
                f.write_time.as_secs_f64() * 1e6
            ),
            f.create.elapsed,
            Some(lower_bound(n, f.write_time, sizes.boot)),
            2.0,
            "n/a (no write time)",
        ));
        for (name, phase, limit) in [
            ("API requests per created machine (no kubelet Node writes)", Some(&f.create), 8.0),
            ("API requests per replaced machine (no kubelet Node writes)", f.roll.as_ref(), 20.0),
        ] {
            rows.push(match phase {
                Some(phase) => {
                    let per = phase.requests.controllers_per_machine(n);
                    at_most_row(name.into(), per, format!("{per:.1}"), limit, format!("<= {limit}"))
                }
                None => not_run(name.into(), format!("<= {limit}"), limit),
            });
        }
        let limit = 100.0;
        let memory_name = "`mcm run` peak resident memory (VmHWM); the target is at 10,000 Running".to_string();
        let memory_target = format!("<= {limit} MiB");
        rows.push(match (self.own_process.is_some(), mcm_run_peak(self.last_phase())) {
            (true, Some(peak)) => {
                let value = peak as f64 / (1024.0 * 1024.0);
                // Memory grows with the machines: over the limit at fewer than 10,000 is a miss already; under it,
                // only a run at 10,000 can tell.
                let verdict = if value > limit {
                    Verdict::Miss
                } else if n >= MEMORY_TARGET_MACHINES {
                    Verdict::Pass
                } else {
                    Verdict::NotApplicable
                };
                Target {
                    name: memory_name,
                    measured: Some(value),
                    shown: format!("{} at {n} machines", mib(peak)),
                    target: memory_target,
                    limit: Some(limit),
                    verdict,
                }
            }
            _ => Target {
                name: memory_name,
                measured: None,
                shown: "n/a (needs --controllers-process)".into(),
                target: memory_target,
                limit: Some(limit),
                verdict: Verdict::NotApplicable,
            },
        });
        let roll_name = format!(
            "rolling update / ideal: ceil(100/{}) waves x boot {:.1} s",
            sizes.surge_percent,
            sizes.boot.as_secs_f64()
        );
        rows.push(match &f.roll {
            Some(roll) => ratio_row(
                roll_name,
                roll.elapsed,
                ideal_roll(sizes.surge_percent, sizes.boot),
                1.2,
                "n/a (needs --boot > 0)",
            ),
            None => not_run(roll_name, "<= 1.2x".into(), 1.2),
        });
        let rest = sizes.rest.as_secs_f64();
        let period = SafetyConfig::default().orphan_vms_period;
        // One orphan collection per class per safety period, plus one a trigger may still owe from the update.
        let calls_allowed = BENCH_CLASSES * (1 + (sizes.rest.as_secs() / period.as_secs().max(1)));
        let calls_target =
            format!("<= {calls_allowed} (O(classes) per {} min, none per machine)", period.as_secs() / 60);
        match &f.rest {
            Some(phase) => {
                // The kubelet simulator's heartbeats are the nodes' writes, as a real kubelet's would be.
                let everyone = phase.requests.writes;
                let ours = everyone.saturating_sub(phase.requests.kubelet);
                rows.push(at_most_row(
                    format!("at rest for {rest:.0} s: API writes, the kubelet simulator's apart"),
                    ours as f64,
                    format!("{ours} ({everyone} with the kubelet's)"),
                    0.0,
                    "0".into(),
                ));
                rows.push(at_most_row(
                    format!("at rest for {rest:.0} s: cloud calls"),
                    phase.cloud_calls as f64,
                    phase.cloud_calls.to_string(),
                    calls_allowed as f64,
                    calls_target,
                ));
            }
            None => {
                let targets = [("API writes", "0".to_string(), 0), ("cloud calls", calls_target, calls_allowed)];
                for (what, target, limit) in targets {
                    rows.push(Target {
                        name: format!("at rest: {what}"),
                        measured: None,
                        shown: "n/a (needs --rest)".into(),
                        target,
                        limit: Some(limit as f64),
                        verdict: Verdict::NotApplicable,
                    });
                }
            }
        }
        rows
    }

    fn controllers_text(&self) -> String {
        match &self.own_process {
            None => "controllers: in this process, as `mcm dev` runs them (no client-side rate limit)".into(),
            Some(config) => format!(
                "controllers: one `mcm run` process (--kube-api-qps={} --kube-api-burst={}), the in-memory cloud \
                 over the driver protocol",
                config.kube_api_qps, config.kube_api_burst
            ),
        }
    }

    /// The report as text: the figures, then the targets table.
    pub fn text(&self) -> String {
        let n = self.sizes.machines;
        let f = &self.figures;
        let mut out = self.sizes.header();
        out.push_str(&format!("{}\n", self.controllers_text()));
        out.push_str(&format!(
            "server write time: {:.1} µs per write ({PROBE_WRITES} Machine status patches, {PROBE_WRITERS} clients at \
             once, before the scenario)\n",
            f.write_time.as_secs_f64() * 1e6
        ));
        let phase = |out: &mut String, title: String, phase: &PhaseFigures| {
            out.push_str(&format!("{title}\n  {}\n", phase.requests.line(n)));
            out.push_str(&format!(
                "  {} requests were writes; cloud calls: {}\n",
                phase.requests.writes, phase.cloud_calls
            ));
            out.push_str(&format!("  resident memory at the end: {}\n", memory_text(&phase.memory)));
        };
        phase(
            &mut out,
            format!(
                "create: {n} machines Running after {:.2} s ({:.0} machines/s)",
                f.create.elapsed.as_secs_f64(),
                n as f64 / f.create.elapsed.as_secs_f64().max(f64::EPSILON)
            ),
            &f.create,
        );
        if let Some(roll) = &f.roll {
            phase(
                &mut out,
                format!("rolling update: {n} machines replaced in {:.2} s", roll.elapsed.as_secs_f64()),
                roll,
            );
        }
        if let Some(rest) = &f.rest {
            phase(&mut out, format!("at rest for {:.0} s", rest.elapsed.as_secs_f64()), rest);
        }
        out.push_str(&format!(
            "cloud: {} VMs created, {} deleted; machines by phase at the end: {:?}\n",
            f.vms_created, f.vms_deleted, f.by_phase
        ));
        out.push_str("\ntargets (issue #25):\n");
        let mut rows = vec![["target".to_string(), "measured".into(), "goal".into(), "verdict".into()]];
        rows.extend(self.targets().into_iter().map(|t| [t.name, t.shown, t.target, t.verdict.text().to_string()]));
        out.push_str(&table(&rows, Align::Left));
        out
    }

    /// The report as one JSON document: the scenario, the figures of each phase, the targets with verdicts.
    pub fn json(&self) -> String {
        let f = &self.figures;
        let n = self.sizes.machines;
        let value = json!({
            "scenario": {
                "machines": n,
                "deployments": self.sizes.deployments.max(1),
                "surge_percent": self.sizes.surge_percent,
                "boot_seconds": self.sizes.boot.as_secs_f64(),
                "rest_seconds": self.sizes.rest.as_secs_f64(),
                "controllers": match &self.own_process {
                    None => json!({"where": "in-process"}),
                    Some(c) => json!({
                        "where": "own process",
                        "kube_api_qps": c.kube_api_qps,
                        "kube_api_burst": c.kube_api_burst,
                    }),
                },
            },
            "write_time_seconds": f.write_time.as_secs_f64(),
            "min_writes_per_machine": MIN_WRITES_PER_MACHINE,
            "lower_bound_seconds": lower_bound(n, f.write_time, self.sizes.boot).as_secs_f64(),
            "create": phase_json(&f.create, n),
            "rolling_update": f.roll.as_ref().map(|p| phase_json(p, n)),
            "rest": f.rest.as_ref().map(|p| phase_json(p, n)),
            "vms": {"created": f.vms_created, "deleted": f.vms_deleted},
            "machines_by_phase": f.by_phase,
            "targets": self.targets(),
        });
        format!("{value:#}\n")
    }
}

fn phase_json(phase: &PhaseFigures, machines: usize) -> Value {
    let r = &phase.requests;
    json!({
        "seconds": phase.elapsed.as_secs_f64(),
        "requests": {
            "total": r.total,
            "kubelet_node_writes": r.kubelet,
            "sets_and_deployments": r.sets,
            "writes": r.writes,
            "per_machine_without_kubelet": r.controllers_per_machine(machines),
            "busiest": r.busiest.iter().map(|(verb, resource, count)| json!({
                "verb": verb, "resource": resource, "count": count,
            })).collect::<Vec<_>>(),
        },
        "cloud_calls": phase.cloud_calls,
        "memory": phase.memory,
    })
}

fn memory_text(memory: &[ProcessMemory]) -> String {
    let bytes = |b: Option<u64>| b.map_or("?".to_string(), mib);
    memory
        .iter()
        .map(|m| format!("{} peak {}, now {}", m.process, bytes(m.peak_bytes), bytes(m.current_bytes)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How a table aligns the columns after the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Align {
    /// Text.
    Left,
    /// Figures.
    Right,
}

/// Rows as aligned columns, two spaces apart: the first left-aligned, the others as `align` says.
pub(super) fn table<const N: usize>(rows: &[[String; N]], align: Align) -> String {
    let widths: Vec<usize> = (0..N).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, width))| match (c, align) {
                (0, _) | (_, Align::Left) => format!("{cell:<width$}"),
                (_, Align::Right) => format!("{cell:>width$}"),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::machines::RequestCounts;
    use crate::bench::process::Side;

    fn phase(seconds: u64, total: u64, kubelet: u64, writes: u64, calls: u64, peak_mib: u64) -> PhaseFigures {
        PhaseFigures {
            elapsed: Duration::from_secs(seconds),
            requests: RequestCounts {
                total,
                kubelet,
                sets: 0,
                writes,
                busiest: vec![("patch".into(), "machines".into(), 3)],
            },
            cloud_calls: calls,
            memory: vec![ProcessMemory {
                process: "mcm run",
                peak_bytes: Some(peak_mib << 20),
                current_bytes: Some((peak_mib / 2) << 20),
            }],
        }
    }

    fn report(boot: u64, rest: Option<PhaseFigures>, own: bool) -> MachinesReport {
        let sizes = MachinesBench {
            machines: 100,
            deployments: 2,
            surge_percent: 10,
            timeout: Duration::ZERO,
            boot: Duration::from_secs(boot),
            rest: if rest.is_some() { Duration::from_secs(30) } else { Duration::ZERO },
            rolling_update: true,
        };
        MachinesReport {
            sizes,
            own_process: own.then(|| ProcessConfig {
                side: Side::Ours,
                program: "mcm".into(),
                kube_api_qps: 0.0,
                kube_api_burst: 30,
            }),
            figures: RunFigures {
                // 100 machines x 4 writes x 1 ms = 0.4 s.
                write_time: Duration::from_millis(1),
                create: phase(1, 900, 100, 500, 300, 60),
                roll: Some(phase(24, 2_500, 200, 1_500, 550, 80)),
                rest,
                vms_created: 200,
                vms_deleted: 100,
                by_phase: [("Running".to_string(), 100)].into(),
            },
        }
    }

    #[test]
    fn the_lower_bound_is_the_minimal_writes_at_the_write_time_or_one_boot() {
        let ms = Duration::from_millis;
        assert_eq!(lower_bound(1_000, Duration::from_micros(100), Duration::ZERO), ms(400));
        assert_eq!(lower_bound(1_000, Duration::from_micros(100), ms(2_000)), ms(2_000));
        assert_eq!(lower_bound(0, ms(1), Duration::ZERO), Duration::ZERO);
        assert_eq!(ideal_roll(10, ms(2_000)), Some(ms(20_000)));
        assert_eq!(ideal_roll(30, ms(1_000)), Some(ms(4_000)), "ceil(100/30) = 4 waves");
        assert_eq!(ideal_roll(0, ms(1_000)), None);
    }

    #[test]
    fn each_target_gets_its_verdict() {
        let targets = report(2, Some(phase(30, 40, 30, 35, 1, 90)), true).targets();
        let verdicts: Vec<(f64, Verdict)> =
            targets.iter().map(|t| (t.measured.unwrap_or(f64::NAN), t.verdict)).collect();
        // 1 s to Running against max(2 s boot, 0.4 s of writes): 0.5x.
        assert_eq!(verdicts[0], (0.5, Verdict::Pass));
        assert_eq!(verdicts[1], (8.0, Verdict::Pass), "(900 - 100) / 100");
        assert_eq!(verdicts[2], (23.0, Verdict::Miss), "(2500 - 200) / 100");
        // 90 MiB at 100 machines: under the limit, but only 10,000 can tell.
        assert_eq!(verdicts[3], (90.0, Verdict::NotApplicable));
        assert_eq!(verdicts[4], (1.2, Verdict::Pass), "24 s against 10 waves x 2 s");
        assert_eq!(verdicts[5], (5.0, Verdict::Miss), "35 writes at rest, 30 of them the kubelet's");
        assert_eq!(verdicts[6], (1.0, Verdict::Pass), "one cloud call at rest");
        assert_eq!(targets.len(), 7);
    }

    #[test]
    fn without_boot_rest_or_own_process_those_targets_are_not_applicable() {
        let targets = report(0, None, false).targets();
        assert_eq!(targets[0].measured, Some(2.5), "1 s against 0.4 s of writes");
        assert_eq!(targets[0].verdict, Verdict::Miss);
        for t in &targets[3..] {
            assert_eq!((t.measured, t.verdict), (None, Verdict::NotApplicable), "{t:?}");
            assert!(t.shown.starts_with("n/a (needs --"), "{t:?}");
        }
        let big = MachinesReport {
            figures: RunFigures { roll: Some(phase(24, 2_500, 200, 1_500, 550, 120)), ..report(0, None, true).figures },
            ..report(0, None, true)
        };
        assert_eq!(big.targets()[3].verdict, Verdict::Miss, "over the limit at any size");
    }

    #[test]
    fn the_text_shows_the_targets_beside_the_figures() {
        let text = report(2, Some(phase(30, 40, 30, 35, 1, 90)), true).text();
        let table: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("targets")).skip(1).collect();
        assert_eq!(table.len(), 8, "{text}");
        assert!(table[0].starts_with("target ") && table[0].ends_with("verdict"), "{text}");
        let row = table.iter().find(|l| l.starts_with("API requests per replaced machine")).unwrap();
        assert!(row.contains("23.0") && row.contains("<= 20") && row.ends_with("MISS"), "{row}");
        let row = table.iter().find(|l| l.starts_with("at rest for 30 s: cloud calls")).unwrap();
        assert!(row.contains("<= 1 (O(classes) per 15 min, none per machine)") && row.ends_with("pass"), "{row}");
        // Every row's columns line up.
        let width = table[0].find("verdict").unwrap();
        assert!(table.iter().all(|l| l.chars().count() >= width), "{text}");
        assert!(text.contains("mcm run peak 90 MiB, now 45 MiB"), "{text}");
        assert!(text.contains("one `mcm run` process"), "{text}");
    }

    #[test]
    fn without_the_rolling_update_its_rows_say_so_and_memory_is_the_creation_s() {
        let mut created = report(0, None, true);
        created.sizes.rolling_update = false;
        created.figures.roll = None;
        let targets = created.targets();
        for t in [&targets[2], &targets[4]] {
            assert_eq!(
                (t.measured, t.verdict, t.shown.as_str()),
                (None, Verdict::NotApplicable, "n/a (--no-rolling-update)")
            );
        }
        assert_eq!(targets[3].measured, Some(60.0), "the peak at the end of the creation");
        let text = created.text();
        assert!(
            text.starts_with("machines: 100 in 2 MachineDeployments (bootSeconds 0), no rolling update\n"),
            "{text}"
        );
        assert!(!text.contains("rolling update: "), "{text}");
        let json: Value = serde_json::from_str(&created.json()).unwrap();
        assert_eq!(json["rolling_update"], Value::Null);
    }

    #[test]
    fn the_json_has_the_scenario_the_phases_and_the_targets() {
        let json: Value = serde_json::from_str(&report(2, None, false).json()).unwrap();
        assert_eq!(json["scenario"]["machines"], 100);
        assert_eq!(json["scenario"]["boot_seconds"], 2.0);
        assert_eq!(json["scenario"]["controllers"]["where"], "in-process");
        assert_eq!(json["min_writes_per_machine"], 4);
        assert_eq!(json["lower_bound_seconds"], 2.0);
        assert_eq!(json["create"]["requests"]["per_machine_without_kubelet"], 8.0);
        assert_eq!(json["create"]["requests"]["busiest"][0]["resource"], "machines");
        assert_eq!(json["rolling_update"]["memory"][0]["peak_bytes"], 80u64 << 20);
        assert_eq!(json["rest"], Value::Null);
        let targets = json["targets"].as_array().unwrap();
        assert_eq!(targets.len(), 7);
        assert_eq!(targets[1]["verdict"], "pass");
        assert_eq!(targets[1]["limit"], 8.0);
        assert_eq!(targets[6]["verdict"], "n/a");
        assert_eq!(targets[6]["measured"], Value::Null);
    }

    #[test]
    fn a_table_aligns_its_columns() {
        let rows = [["a".to_string(), "1".into()], ["longer".into(), "100".into()]];
        assert_eq!(table(&rows, Align::Right), "a         1\nlonger  100\n");
        assert_eq!(table(&rows, Align::Left), "a       1\nlonger  100\n");
    }
}
