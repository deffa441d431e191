//! The Prometheus text exposition (format 0.0.4) written so that Prometheus's own parser takes
//! it: every metric family once, its `# HELP` and `# TYPE` lines before its samples, and the
//! samples of every source (each worker, each process) under that one header. Samples are
//! gathered by family first and written out at the end, so no family is ever split into two
//! runs (upstream repeats a family's header for every worker, which Prometheus refuses: "second
//! HELP line for metric name").

use std::fmt::Write as _;

/// What a family's `# TYPE` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family: its header and the sample lines gathered for it so far.
#[derive(Debug)]
struct Family {
    /// The family's name, as `# HELP` and `# TYPE` write it.
    name: String,
    /// The `# HELP` text.
    help: String,
    /// The `# TYPE`.
    kind: Kind,
    /// Complete sample lines, each ending with a newline.
    samples: String,
}

/// Families in the order they were first declared, with their samples.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// The sample buffer of family `name`, declared with `help` and `kind` the first time (a
    /// later declaration's help and kind are ignored: one family, one header). Write whole
    /// lines into it, each ending with `\n`.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) -> &mut String {
        let at = match self.families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                self.families.push(Family {
                    name: name.to_owned(),
                    help: help.to_owned(),
                    kind,
                    samples: String::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[at].samples
    }

    /// One sample line `name{labels} value` into family `name` (no labels: `labels` empty).
    pub fn sample(&mut self, name: &str, help: &str, kind: Kind, labels: &str, value: f64) {
        let line = sample_line(name, labels, value);
        self.family(name, help, kind).push_str(&line);
    }

    /// Every family and sample of `other` added to ours (samples after ours in a family
    /// both have).
    pub fn merge(&mut self, other: Exposition) {
        for f in other.families {
            self.family(&f.name, &f.help, f.kind).push_str(&f.samples);
        }
    }

    /// The text: each family's header, then its samples.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
            out.push_str(&f.samples);
        }
        out
    }
}

/// `name{labels} value\n`, or `name value\n` without labels.
pub fn sample_line(name: &str, labels: &str, value: f64) -> String {
    if labels.is_empty() {
        format!("{name} {}\n", num(value))
    } else {
        format!("{name}{{{labels}}} {}\n", num(value))
    }
}

/// A label's value escaped as the text format wants it (backslash, double quote, newline).
pub fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A help text escaped as the text format wants it (backslash, newline).
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A number as prometheus_client writes floats (upstream's manager uses it): integral values
/// with `.0`.
pub fn num(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_declared_twice_is_written_once() {
        let mut e = Exposition::default();
        e.sample("a_total", "first", Kind::Counter, "w=\"0\"", 1.0);
        e.sample("b", "other", Kind::Gauge, "", 2.5);
        e.sample("a_total", "ignored", Kind::Gauge, "w=\"1\"", 3.0);
        assert_eq!(
            e.render(),
            "# HELP a_total first\n# TYPE a_total counter\na_total{w=\"0\"} 1.0\na_total{w=\"1\"} 3.0\n\
             # HELP b other\n# TYPE b gauge\nb 2.5\n"
        );
    }

    #[test]
    fn merged_samples_join_their_family() {
        let mut a = Exposition::default();
        a.sample("x", "x", Kind::Gauge, "i=\"0\"", 0.0);
        let mut b = Exposition::default();
        b.sample("y", "y", Kind::Gauge, "", 1.0);
        b.sample("x", "x", Kind::Gauge, "i=\"1\"", 1.0);
        a.merge(b);
        assert_eq!(
            a.render(),
            "# HELP x x\n# TYPE x gauge\nx{i=\"0\"} 0.0\nx{i=\"1\"} 1.0\n# HELP y y\n# TYPE y gauge\ny 1.0\n"
        );
    }

    #[test]
    fn labels_and_numbers_are_written_as_the_format_wants() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(num(3.0), "3.0");
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(f64::INFINITY), "+Inf");
        assert_eq!(num(f64::NAN), "NaN");
    }
}
