//! Progress of long commands (`mcm migrate apply|rollback`, `mcm bench`): on a terminal one line per step,
//! rewritten in place as its count and time move on, then left as a summary; elsewhere (logs, CI) plain lines,
//! each written once.

use std::io::Write;
use std::time::{Duration, Instant};

/// The step being shown on a terminal.
#[derive(Debug)]
struct Live {
    text: String,
    count: usize,
    last: Option<String>,
    started: Instant,
}

/// Shows the steps of a long command on `out` (a terminal, or not).
#[derive(Debug)]
pub struct Reporter<W: Write> {
    out: W,
    terminal: bool,
    /// What the counted items are (`objects`).
    unit: &'static str,
    live: Option<Live>,
}

/// `12.3s`, `2m05s`: how long a step took.
pub fn elapsed(d: Duration) -> String {
    match d.as_secs() {
        s if s < 60 => format!("{:.1}s", d.as_secs_f64()),
        s => format!("{}m{:02}s", s / 60, s % 60),
    }
}

impl<W: Write> Reporter<W> {
    /// A reporter writing to `out`; `terminal` chooses the live line; `unit` names what [`Reporter::item`] counts.
    pub fn new(out: W, terminal: bool, unit: &'static str) -> Self {
        Reporter { out, terminal, unit, live: None }
    }

    fn draw(&mut self) -> std::io::Result<()> {
        let Some(live) = &self.live else {
            return Ok(());
        };
        let mut line = format!("{} … {}", live.text, elapsed(live.started.elapsed()));
        if live.count > 0 {
            line.push_str(&format!(", {} {}", live.count, self.unit));
        }
        if let Some(last) = &live.last {
            line.push_str(&format!(" ({})", last.trim()));
        }
        write!(self.out, "\r\x1b[2K{line}")?;
        self.out.flush()
    }

    /// A step starts (a terminal's previous live line is kept as it was).
    pub fn start(&mut self, text: &str) -> std::io::Result<()> {
        if !self.terminal {
            writeln!(self.out, "{text}")?;
            return self.out.flush();
        }
        self.close()?;
        self.live = Some(Live { text: text.to_string(), count: 0, last: None, started: Instant::now() });
        self.draw()
    }

    /// One more item of the step: counted on a terminal, a line of its own elsewhere.
    pub fn item(&mut self, text: &str) -> std::io::Result<()> {
        match self.live.as_mut() {
            Some(live) if self.terminal => {
                live.count += 1;
                live.last = Some(text.to_string());
                self.draw()
            }
            _ => {
                writeln!(self.out, "{text}")?;
                self.out.flush()
            }
        }
    }

    /// Redraws a terminal's live line (its time moves on).
    pub fn tick(&mut self) -> std::io::Result<()> {
        if self.terminal { self.draw() } else { Ok(()) }
    }

    /// The step is done: `text` replaces a terminal's live line (with the count and the time), or is a line.
    pub fn finish(&mut self, text: &str) -> std::io::Result<()> {
        match self.live.take() {
            Some(live) if self.terminal => {
                let count = match live.count {
                    0 => String::new(),
                    n => format!("{n} {}, ", self.unit),
                };
                writeln!(self.out, "\r\x1b[2K{text} ({count}{})", elapsed(live.started.elapsed()))?;
            }
            _ => writeln!(self.out, "{text}")?,
        }
        self.out.flush()
    }

    /// Ends a terminal's live line, keeping it (before other output, or at the end).
    pub fn close(&mut self) -> std::io::Result<()> {
        if let Some(live) = self.live.take() {
            let count = match live.count {
                0 => String::new(),
                n => format!("{n} {}, ", self.unit),
            };
            writeln!(self.out, "\r\x1b[2K{} ({count}{})", live.text, elapsed(live.started.elapsed()))?;
            self.out.flush()?;
        }
        Ok(())
    }
}

/// A reporter on standard error shared by a command's tasks, its live line kept moving (every second) by a ticker
/// on `runtime`. Errors writing progress are ignored: progress is never worth failing a command for.
pub struct Shared {
    reporter: std::sync::Arc<std::sync::Mutex<Reporter<std::io::Stderr>>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Shared {
    /// Progress on standard error (a live line only if it is a terminal).
    pub fn stderr(runtime: &tokio::runtime::Runtime) -> Shared {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        let reporter = std::sync::Arc::new(std::sync::Mutex::new(Reporter::new(std::io::stderr(), terminal, "")));
        let ticking = reporter.clone();
        let ticker = terminal.then(|| {
            runtime.spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(1));
                loop {
                    every.tick().await;
                    if let Ok(mut r) = ticking.lock() {
                        let _ = r.tick();
                    }
                }
            })
        });
        Shared { reporter, ticker }
    }

    /// A step starts.
    pub fn start(&self, text: &str) {
        if let Ok(mut r) = self.reporter.lock() {
            let _ = r.start(text);
        }
    }

    /// Stops the ticker and keeps the last step's line.
    pub fn close(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
        if let Ok(mut r) = self.reporter.lock() {
            let _ = r.close();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8]) -> String {
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn plain_lines_when_not_a_terminal() {
        let mut out = Vec::new();
        let mut r = Reporter::new(&mut out, false, "objects");
        r.start("pool: step created: create").unwrap();
        r.item("pool:   created Machine m1").unwrap();
        r.tick().unwrap();
        r.finish("pool: step created: done").unwrap();
        r.close().unwrap();
        assert_eq!(text(&out), "pool: step created: create\npool:   created Machine m1\npool: step created: done\n");
    }

    #[test]
    fn one_rewritten_line_per_step_on_a_terminal() {
        let mut out = Vec::new();
        let mut r = Reporter::new(&mut out, true, "objects");
        r.start("step one").unwrap();
        r.item("made a").unwrap();
        r.item("made b").unwrap();
        r.finish("step one: done").unwrap();
        r.start("step two").unwrap();
        r.close().unwrap();
        let out = text(&out);
        let lines: Vec<&str> = out.split('\n').collect();
        assert_eq!(lines.len(), 3, "{out:?}");
        assert!(lines[0].contains("\r\x1b[2Kstep one … ") && lines[0].contains(", 2 objects (made b)"), "{out:?}");
        assert!(lines[0].ends_with("\r\x1b[2Kstep one: done (2 objects, 0.0s)"), "{out:?}");
        assert!(lines[1].ends_with("\r\x1b[2Kstep two (0.0s)"), "{out:?}");
        assert_eq!(lines[2], "");
    }

    #[test]
    fn elapsed_times() {
        assert_eq!(elapsed(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(elapsed(Duration::from_secs(125)), "2m05s");
    }
}
