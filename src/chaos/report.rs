//! What a chaos run prints: a row per trial with the faults it made and the figures, a row per trial with the
//! invariants' verdicts, and what broke; or the same as JSON.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::cloud::CloudFaultCounts;
use super::invariants::{INVARIANTS, Verdict};
use super::plan::Step;

/// One trial's faults, figures and verdicts.
#[derive(Clone, Debug)]
pub struct TrialReport {
    /// Its number.
    pub trial: u32,
    /// Its seed (`mcm chaos --seed S` re-runs the run; the trial seeds follow from it).
    pub seed: u64,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The replicas it ended with.
    pub replicas: u32,
    /// Leaders killed.
    pub kills: u32,
    /// Times every watch was closed.
    pub watch_closes: u32,
    /// API server pauses.
    pub pauses: u32,
    /// VMs planted behind the controllers' back.
    pub planted: u32,
    /// API requests failed on purpose.
    pub api_failures: u64,
    /// Cloud calls failed on purpose.
    pub cloud_faults: CloudFaultCounts,
    /// VMs created and deleted during the trial.
    pub vms_created: u64,
    /// See `vms_created`.
    pub vms_deleted: u64,
    /// The most machines (not being deleted) a watcher saw at once.
    pub peak_machines: u32,
    /// The fewest Running ones it saw.
    pub lowest_running: Option<u32>,
    /// Watcher observations while a MachineSet was frozen by the overshoot freeze (the floor is not judged then).
    pub frozen: u32,
    /// From the end of the faults to convergence (`None`: not within the timeout).
    pub converge: Option<Duration>,
    /// The whole trial.
    pub elapsed: Duration,
    /// Every invariant's verdict, in [`INVARIANTS`] order.
    pub verdicts: Vec<Verdict>,
}

impl TrialReport {
    /// Whether every invariant held.
    pub fn held(&self) -> bool {
        self.verdicts.iter().all(|v| v.held)
    }

    /// One line of what the trial came to, printed as soon as it ends (the tables come at the end of the run).
    pub fn summary(&self) -> String {
        let converge = match self.converge {
            Some(d) => format!("converged in {:.1} s", d.as_secs_f64()),
            None => "did not converge".to_string(),
        };
        let broken: Vec<&str> = self.verdicts.iter().filter(|v| !v.held).map(|v| v.invariant).collect();
        let verdict = match broken.is_empty() {
            true => "every invariant held".to_string(),
            false => format!("BROKEN: {}", broken.join(", ")),
        };
        format!(
            "trial {}: {verdict}; {converge}; {} kills, {} API faults, {} cloud faults, {}/{} VMs made/deleted",
            self.trial,
            self.kills,
            self.api_failures,
            self.cloud_faults.total(),
            self.vms_created,
            self.vms_deleted
        )
    }

    fn steps_text(&self) -> String {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Scale(n) => format!("scale {n}"),
                Step::RollingUpdate(rev) => format!("roll to rev {rev}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn json(&self) -> Value {
        json!({
            "trial": self.trial,
            "seed": self.seed,
            "steps": self.steps_text(),
            "replicas": self.replicas,
            "faults": {
                "leaderKills": self.kills,
                "watchCloses": self.watch_closes,
                "apiServerPauses": self.pauses,
                "plantedVMs": self.planted,
                "apiFailures": self.api_failures,
                "cloud": self.cloud_faults,
            },
            "vmsCreated": self.vms_created,
            "vmsDeleted": self.vms_deleted,
            "peakMachines": self.peak_machines,
            "lowestRunning": self.lowest_running,
            "frozenObservations": self.frozen,
            "convergeSeconds": self.converge.map(|d| d.as_secs_f64()),
            "seconds": self.elapsed.as_secs_f64(),
            "held": self.held(),
            "verdicts": self.verdicts,
        })
    }
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct ChaosReport {
    /// The run's seed.
    pub seed: u64,
    /// The deployment's largest size.
    pub machines: u32,
    /// Faults per trial.
    pub window: Duration,
    /// The whole run.
    pub elapsed: Duration,
    /// Where the processes' logs were kept (when something broke).
    pub logs: Option<PathBuf>,
    /// The trials run (a run stops at the first broken invariant).
    pub trials: Vec<TrialReport>,
}

impl ChaosReport {
    /// Whether every invariant of every trial held.
    pub fn held(&self) -> bool {
        self.trials.iter().all(TrialReport::held)
    }

    /// The report as JSON.
    pub fn json(&self) -> Value {
        json!({
            "seed": self.seed,
            "machines": self.machines,
            "faultSecondsPerTrial": self.window.as_secs_f64(),
            "seconds": self.elapsed.as_secs_f64(),
            "held": self.held(),
            "logs": self.logs,
            "trials": self.trials.iter().map(TrialReport::json).collect::<Vec<_>>(),
        })
    }

    /// The report as text tables.
    pub fn text(&self) -> String {
        let mut out = format!(
            "mcm chaos: seed {}, {} trial(s), up to {} machines, {:.0} s of faults per trial, {:.0} s in all\n\n",
            self.seed,
            self.trials.len(),
            self.machines,
            self.window.as_secs_f64(),
            self.elapsed.as_secs_f64()
        );
        let header = [
            "trial",
            "steps",
            "kills",
            "watch closes",
            "pauses",
            "planted VMs",
            "API faults",
            "cloud faults",
            "VMs made/deleted",
            "peak",
            "lowest Running",
            "frozen",
            "converged in",
        ];
        let rows: Vec<Vec<String>> = self
            .trials
            .iter()
            .map(|t| {
                vec![
                    t.trial.to_string(),
                    t.steps_text(),
                    t.kills.to_string(),
                    t.watch_closes.to_string(),
                    t.pauses.to_string(),
                    t.planted.to_string(),
                    t.api_failures.to_string(),
                    format!(
                        "{} (quota {}, failed {}, lost answer {}, throttled {})",
                        t.cloud_faults.total(),
                        t.cloud_faults.quota,
                        t.cloud_faults.failed_creates,
                        t.cloud_faults.lost_answers,
                        t.cloud_faults.throttled
                    ),
                    format!("{}/{}", t.vms_created, t.vms_deleted),
                    t.peak_machines.to_string(),
                    t.lowest_running.map_or("-".into(), |n| n.to_string()),
                    t.frozen.to_string(),
                    t.converge.map_or("not converged".into(), |d| format!("{:.1} s", d.as_secs_f64())),
                ]
            })
            .collect();
        out.push_str(&table(&header, &rows));
        out.push('\n');
        let mut header = vec!["trial"];
        header.extend(INVARIANTS);
        let rows: Vec<Vec<String>> = self
            .trials
            .iter()
            .map(|t| {
                let mut row = vec![t.trial.to_string()];
                row.extend(t.verdicts.iter().map(|v| if v.held { "held" } else { "BROKEN" }.to_string()));
                row
            })
            .collect();
        out.push_str(&table(&header, &rows));
        for t in &self.trials {
            for v in t.verdicts.iter().filter(|v| !v.held) {
                out.push_str(&format!("\ntrial {} (seed {}): {}: {}", t.trial, t.seed, v.invariant, v.detail));
            }
        }
        if let Some(dir) = &self.logs {
            out.push_str(&format!("\nthe controllers' logs: {}", dir.display()));
        }
        out.push_str(match self.held() {
            true => "\n\nevery invariant held\n",
            false => "\n\nan invariant broke\n",
        });
        out
    }
}

/// A plain text table, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(held: bool) -> TrialReport {
        let mut verdicts: Vec<Verdict> =
            INVARIANTS.iter().map(|i| Verdict { invariant: i, held: true, detail: String::new() }).collect();
        if !held {
            verdicts[1] = Verdict { invariant: INVARIANTS[1], held: false, detail: "VM i-1 has no machine".into() };
        }
        TrialReport {
            trial: 1,
            seed: 42,
            steps: vec![Step::Scale(10), Step::RollingUpdate(1), Step::Scale(6)],
            replicas: 6,
            kills: 2,
            watch_closes: 9,
            pauses: 1,
            planted: 3,
            api_failures: 37,
            cloud_faults: CloudFaultCounts { quota: 1, failed_creates: 2, lost_answers: 1, throttled: 5 },
            vms_created: 21,
            vms_deleted: 15,
            peak_machines: 12,
            lowest_running: Some(0),
            frozen: 0,
            converge: Some(Duration::from_millis(4200)),
            elapsed: Duration::from_secs(50),
            verdicts,
        }
    }

    fn report(held: bool) -> ChaosReport {
        ChaosReport {
            seed: 42,
            machines: 10,
            window: Duration::from_secs(30),
            elapsed: Duration::from_secs(50),
            logs: None,
            trials: vec![trial(held)],
        }
    }

    #[test]
    fn the_text_shows_the_faults_the_figures_and_every_verdict() {
        let text = report(true).text();
        for part in [
            "seed 42, 1 trial(s), up to 10 machines",
            "scale 10, roll to rev 1, scale 6",
            "9 (quota 1, failed 2, lost answer 1, throttled 5)",
            "21/15",
            "4.2 s",
            "VMs = Running machines",
            "every invariant held",
        ] {
            assert!(text.contains(part), "{part}:\n{text}");
        }
        assert!(!text.contains("BROKEN"), "{text}");
    }

    #[test]
    fn a_broken_invariant_is_marked_and_explained() {
        let r = report(false);
        assert!(!r.held());
        let text = r.text();
        assert!(text.contains("BROKEN"), "{text}");
        assert!(text.contains("trial 1 (seed 42): VMs = Running machines: VM i-1 has no machine"), "{text}");
        assert!(text.ends_with("an invariant broke\n"), "{text}");
        assert_eq!(r.json()["held"], false);
        assert_eq!(r.json()["trials"][0]["faults"]["cloud"]["throttled"], 5);
    }

    #[test]
    fn a_trial_summary_names_what_broke() {
        assert_eq!(
            trial(true).summary(),
            "trial 1: every invariant held; converged in 4.2 s; 2 kills, 37 API faults, 9 cloud faults, 21/15 VMs \
             made/deleted"
        );
        let mut broken = trial(false);
        broken.converge = None;
        assert!(broken.summary().starts_with("trial 1: BROKEN: VMs = Running machines; did not converge;"));
    }
}
