//! A trial's plan, drawn from the seed alone (pure): what the deployment is driven through and which faults
//! fire when. The same seed and options give the same plan; what the processes make of it depends on timing.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a trial asks of the MachineDeployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Set `spec.replicas`.
    Scale(u32),
    /// A new template label `chaos-rev: <n>`: every machine is replaced.
    RollingUpdate(u32),
}

/// A fault, at its offset from the start of the trial's fault window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the leading `mcm run`; a new standby replaces it.
    KillLeader,
    /// End every open watch.
    CloseWatches,
    /// The API server answers nothing for this long (longer than the safety status-check timeout).
    PauseApiServer(Duration),
    /// A VM of another cluster appears (another cluster's tag and the node role).
    ForeignVm,
    /// A VM with no tags at all appears.
    UntaggedVm,
    /// A VM with our tags and no Machine appears: an orphan, to be collected within one orphan period.
    OrphanVm,
}

/// How hard a trial is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Intensity {
    /// The deployment's size at its largest.
    pub machines: u32,
    /// How long faults fire (steps are spread over it too).
    pub window: Duration,
    /// Leader kills per trial.
    pub kills: u32,
    /// Longest gap between two watch closures (the shortest is a third of it).
    pub watch_close_every: Duration,
    /// How long a pause of the API server lasts (0: none).
    pub pause: Duration,
}

/// One trial: its steps and faults, each at an offset into the window, sorted by offset.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialPlan {
    /// The trial's number (from 1).
    pub trial: u32,
    /// The seed of this trial's draws (also the API server's and the cloud's).
    pub seed: u64,
    /// Workload steps.
    pub steps: Vec<(Duration, Step)>,
    /// Faults.
    pub faults: Vec<(Duration, Fault)>,
}

impl TrialPlan {
    /// The replicas the deployment ends the trial with.
    pub fn final_replicas(&self, before: u32) -> u32 {
        self.steps.iter().fold(before, |replicas, (_, step)| match step {
            Step::Scale(n) => *n,
            Step::RollingUpdate(_) => replicas,
        })
    }

    /// The template revision the trial ends with.
    pub fn final_revision(&self, before: u32) -> u32 {
        self.steps.iter().fold(before, |rev, (_, step)| match step {
            Step::RollingUpdate(n) => *n,
            Step::Scale(_) => rev,
        })
    }
}

/// The seed of trial `trial` of a run seeded `seed`: each trial can be re-run alone.
pub fn trial_seed(seed: u64, trial: u32) -> u64 {
    // splitmix64's increment spreads neighbouring seeds apart.
    seed.wrapping_add(u64::from(trial).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Draws trial `trial` (from 1). The first trial starts from no machines; every trial scales up, scales down,
/// rolls and ends at a size between half and all of `machines`. `revision` is the template revision before it.
pub fn plan(seed: u64, trial: u32, revision: u32, intensity: &Intensity) -> TrialPlan {
    let seed = trial_seed(seed, trial);
    let mut rng = StdRng::seed_from_u64(seed);
    let window = intensity.window.max(Duration::from_secs(1));
    let at = |rng: &mut StdRng, from: f64, to: f64| window.mul_f64(rng.random_range(from..to));
    let full = intensity.machines.max(2);
    let half = (full / 2).max(1);
    // A scale-up to the full size, a rolling update while it may still be under way, a scale-down, and a
    // last scale to a size drawn between half and full: the order of a real day, compressed.
    let steps = vec![
        (at(&mut rng, 0.0, 0.1), Step::Scale(full)),
        (at(&mut rng, 0.2, 0.4), Step::RollingUpdate(revision + 1)),
        (at(&mut rng, 0.45, 0.65), Step::Scale(rng.random_range(half..full))),
        (at(&mut rng, 0.7, 0.85), Step::Scale(rng.random_range(half..=full))),
    ];
    let mut faults = Vec::new();
    for _ in 0..intensity.kills {
        faults.push((at(&mut rng, 0.05, 0.9), Fault::KillLeader));
    }
    let every = intensity.watch_close_every.max(Duration::from_millis(300));
    let mut t = Duration::ZERO;
    loop {
        t += every.mul_f64(rng.random_range(1.0 / 3.0..=1.0));
        if t >= window {
            break;
        }
        faults.push((t, Fault::CloseWatches));
    }
    if !intensity.pause.is_zero() {
        faults.push((at(&mut rng, 0.3, 0.7), Fault::PauseApiServer(intensity.pause)));
    }
    for fault in [Fault::ForeignVm, Fault::UntaggedVm, Fault::OrphanVm] {
        faults.push((at(&mut rng, 0.0, 0.9), fault));
    }
    let mut steps = steps;
    steps.sort_by_key(|(offset, _)| *offset);
    faults.sort_by_key(|(offset, _)| *offset);
    TrialPlan { trial, seed, steps, faults }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intensity() -> Intensity {
        Intensity {
            machines: 100,
            window: Duration::from_secs(60),
            kills: 2,
            watch_close_every: Duration::from_secs(6),
            pause: Duration::from_secs(15),
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_plan_and_another_seed_another() {
        assert_eq!(plan(42, 3, 2, &intensity()), plan(42, 3, 2, &intensity()));
        assert_ne!(plan(42, 3, 2, &intensity()), plan(43, 3, 2, &intensity()));
        assert_ne!(plan(42, 3, 2, &intensity()), plan(42, 4, 2, &intensity()));
    }

    #[test]
    fn every_trial_scales_up_rolls_scales_down_and_ends_in_bounds() {
        for seed in 0..200 {
            let p = plan(seed, 1, 4, &intensity());
            let kinds: Vec<Step> = p.steps.iter().map(|(_, s)| *s).collect();
            assert_eq!(kinds[0], Step::Scale(100), "{p:?}");
            assert_eq!(kinds[1], Step::RollingUpdate(5), "{p:?}");
            assert!(matches!(kinds[2], Step::Scale(n) if (50..100).contains(&n)), "{p:?}");
            assert!((50..=100).contains(&p.final_replicas(0)), "{p:?}");
            assert_eq!(p.final_revision(4), 5);
            assert!(p.steps.windows(2).all(|w| w[0].0 <= w[1].0));
            assert!(p.faults.iter().all(|(t, _)| *t < Duration::from_secs(60)), "{p:?}");
        }
    }

    #[test]
    fn the_faults_are_as_many_as_the_intensity_says() {
        let p = plan(7, 1, 0, &intensity());
        let count = |f: &dyn Fn(&Fault) -> bool| p.faults.iter().filter(|(_, x)| f(x)).count();
        assert_eq!(count(&|f| *f == Fault::KillLeader), 2);
        assert_eq!(count(&|f| matches!(f, Fault::PauseApiServer(d) if *d == Duration::from_secs(15))), 1);
        assert_eq!(count(&|f| matches!(f, Fault::ForeignVm | Fault::UntaggedVm | Fault::OrphanVm)), 3);
        // Every 2 to 6 s over 60 s.
        assert!((10..=30).contains(&count(&|f| *f == Fault::CloseWatches)), "{p:?}");
        let quiet = plan(7, 1, 0, &Intensity { kills: 0, pause: Duration::ZERO, ..intensity() });
        assert!(!quiet.faults.iter().any(|(_, f)| matches!(f, Fault::KillLeader | Fault::PauseApiServer(_))));
    }

    #[test]
    fn trial_seeds_differ_and_are_stable() {
        assert_eq!(trial_seed(1, 0), 1);
        assert_ne!(trial_seed(1, 1), trial_seed(1, 2));
        assert_eq!(trial_seed(1, 2), trial_seed(1, 2));
    }
}
