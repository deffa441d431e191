//! A strict reader of the Prometheus text exposition format (0.0.4), stricter than
//! Prometheus's own parser where that parser is lenient: every family has exactly one `# HELP`
//! and one `# TYPE`, both before its samples; its samples form one run; names, label syntax,
//! escapes and values are valid; histograms have cumulative buckets ending in `+Inf` equal to
//! their `_count`. Shared by the unit tests of `metrics` and the end-to-end tests.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

/// A sample's labels, in the order written.
pub type Labels = Vec<(String, String)>;

/// A histogram series as read: its buckets (upper bound, cumulative count) and its `_count`.
type Series = (Vec<(f64, f64)>, Option<f64>);

/// One sample as read: its name, labels in order, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if it has one.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A family: its header and samples.
#[derive(Debug, Default, Clone)]
pub struct Family {
    pub help: Option<String>,
    pub kind: Option<String>,
    pub samples: Vec<Sample>,
}

/// A whole exposition, by family name.
#[derive(Debug, Default)]
pub struct Parsed {
    pub families: BTreeMap<String, Family>,
}

impl Parsed {
    /// The samples named `name` (any family).
    pub fn samples(&self, name: &str) -> Vec<&Sample> {
        self.families
            .values()
            .flat_map(|f| f.samples.iter())
            .filter(|s| s.name == name)
            .collect()
    }

    /// The value of the one sample `name` whose labels include every pair of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<f64> = self
            .samples(name)
            .into_iter()
            .filter(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
            .collect();
        match found.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => s.parse::<f64>().map_err(|e| format!("value {s:?}: {e}")),
    }
}

/// `{a="x",b="y"}` after the name; returns the labels and the rest of the line.
fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = s.strip_prefix('{').ok_or("labels do not start with {")?;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, '\n')) => return Err("newline in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.iter().any(|(k, _)| k == name) {
            return Err(format!("label {name} twice"));
        }
        labels.push((name.to_owned(), value));
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("sample without value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("metric name {name:?}"));
    }
    let (labels, rest) = if line[name_end..].starts_with('{') {
        parse_labels(&line[name_end..])?
    } else {
        (Vec::new(), &line[name_end..])
    };
    let mut fields = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ');
    let value = parse_value(fields.next().ok_or("no value")?)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|e| format!("timestamp {ts:?}: {e}"))?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The family a sample named `name` belongs to, given the families declared so far.
fn family_of(name: &str, declared: &BTreeMap<String, Family>) -> String {
    for suffix in ["_bucket", "_count", "_sum"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if declared
                .get(base)
                .is_some_and(|f| f.kind.as_deref() == Some("histogram"))
            {
                return base.to_owned();
            }
        }
    }
    name.to_owned()
}

/// Where the reader is: the family whose run goes on, and those whose run ended.
#[derive(Default)]
struct Runs {
    current: Option<String>,
    finished: BTreeSet<String>,
}

impl Runs {
    /// A line of `family` comes: it goes on with the current run or starts a new one, never
    /// one that ended.
    fn enter(&mut self, family: &str) -> Result<(), String> {
        if !is_metric_name(family) {
            return Err(format!("metric name {family:?}"));
        }
        if self.current.as_deref() == Some(family) {
            return Ok(());
        }
        if self.finished.contains(family) {
            return Err(format!("family {family} split into two runs"));
        }
        if let Some(previous) = self.current.replace(family.to_owned()) {
            self.finished.insert(previous);
        }
        Ok(())
    }
}

/// A `# HELP` or `# TYPE` line of `family`.
fn header(parsed: &mut Parsed, family: &str, what: &str, text: &str) -> Result<(), String> {
    let entry = parsed.families.entry(family.to_owned()).or_default();
    if !entry.samples.is_empty() {
        return Err(format!("{what} of {family} after its samples"));
    }
    let slot = if what == "HELP" {
        &mut entry.help
    } else {
        if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&text) {
            return Err(format!("unknown type {text}"));
        }
        &mut entry.kind
    };
    if slot.replace(text.to_owned()).is_some() {
        return Err(format!("second {what} line for {family}"));
    }
    Ok(())
}

/// A sample line, into its family.
fn sample(parsed: &mut Parsed, runs: &mut Runs, line: &str) -> Result<(), String> {
    let sample = parse_sample(line)?;
    let family = family_of(&sample.name, &parsed.families);
    runs.enter(&family)?;
    let entry = parsed
        .families
        .get_mut(&family)
        .filter(|f| f.help.is_some() && f.kind.is_some())
        .ok_or_else(|| format!("sample of {family} before its HELP and TYPE"))?;
    if entry
        .samples
        .iter()
        .any(|s| s.name == sample.name && s.labels == sample.labels)
    {
        return Err(format!("sample {} twice with the same labels", sample.name));
    }
    entry.samples.push(sample);
    Ok(())
}

/// Read `text` strictly; the first violation, with its line number, is the error.
pub fn parse(text: &str) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    let mut runs = Runs::default();
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line does not end with a newline".into());
    }
    for (n, line) in text.lines().enumerate() {
        let result = if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            runs.enter(name)
                .and_then(|()| header(&mut parsed, name, "HELP", help))
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            match rest.split_once(' ') {
                Some((name, kind)) => runs
                    .enter(name)
                    .and_then(|()| header(&mut parsed, name, "TYPE", kind)),
                None => Err("TYPE without a type".into()),
            }
        } else if line.starts_with('#') || line.trim().is_empty() {
            Ok(())
        } else {
            sample(&mut parsed, &mut runs, line)
        };
        result.map_err(|e| format!("line {}: {e}: {line:?}", n + 1))?;
    }
    for (name, family) in &parsed.families {
        check_family(name, family)?;
    }
    Ok(parsed)
}

/// What a family's type asks of its samples.
fn check_family(name: &str, family: &Family) -> Result<(), String> {
    let (Some(_), Some(kind)) = (&family.help, &family.kind) else {
        return Err(format!("{name}: HELP or TYPE missing"));
    };
    if kind != "histogram" {
        if let Some(s) = family.samples.iter().find(|s| s.name != *name) {
            return Err(format!("{name}: sample {} in a {kind}", s.name));
        }
        if kind == "counter" && family.samples.iter().any(|s| s.value < 0.0) {
            return Err(format!("{name}: a negative counter"));
        }
        return Ok(());
    }
    // Per label set without `le`: buckets cumulative, +Inf last and equal to _count.
    let mut series: BTreeMap<Labels, Series> = BTreeMap::new();
    for s in &family.samples {
        let key: Vec<_> = s
            .labels
            .iter()
            .filter(|(k, _)| k != "le")
            .cloned()
            .collect();
        let entry = series.entry(key).or_default();
        if s.name.ends_with("_bucket") {
            let le = s
                .label("le")
                .ok_or_else(|| format!("{name}: bucket without le"))?;
            entry.0.push((parse_value(le)?, s.value));
        } else if s.name.ends_with("_count") {
            entry.1 = Some(s.value);
        }
    }
    for (labels, (buckets, count)) in series {
        let last = buckets
            .last()
            .ok_or_else(|| format!("{name}{labels:?}: no bucket"))?;
        if last.0 != f64::INFINITY {
            return Err(format!("{name}{labels:?}: no +Inf bucket"));
        }
        if buckets
            .windows(2)
            .any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1)
        {
            return Err(format!("{name}{labels:?}: buckets not cumulative"));
        }
        if count != Some(last.1) {
            return Err(format!(
                "{name}{labels:?}: _count differs from the +Inf bucket"
            ));
        }
    }
    Ok(())
}

#[test]
fn the_checker_refuses_what_prometheus_refuses() {
    let ok = "# HELP a x\n# TYPE a counter\na{l=\"1\"} 1\n";
    assert!(parse(ok).is_ok());
    for bad in [
        "# HELP a x\n# TYPE a counter\na 1\n# HELP a x\n# TYPE a counter\na{l=\"2\"} 1\n",
        "# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\n# HELP b y\n# TYPE b gauge\nb 1\na{l=\"2\"} 1\n",
        "a 1\n",
        "# HELP a x\n# TYPE a gauge\na{l=1} 1\n",
        "# HELP a x\n# TYPE a gauge\na{l=\"\\x\"} 1\n",
        "# HELP a-b x\n# TYPE a-b gauge\na-b 1\n",
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0\n",
    ] {
        assert!(parse(bad).is_err(), "accepted: {bad}");
    }
}
