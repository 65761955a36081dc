//! Server-side printing: the `meta.k8s.io/v1` `Table` that `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, so that the columns it prints are the ones a real
//! cluster prints.
//!
//! Custom resources get a `Name` column followed by their CRD version's `additionalPrinterColumns` (or `Age` when
//! there are none), evaluated with kube-apiserver's JSONPath dialect ([`jsonpath`]). Built-in kinds get the columns
//! of kube's own printers for the kinds users of this project look at (`builtin.rs`); every other built-in kind gets
//! `Name` and `Age`. As in kube-apiserver, every column is sent, wide ones with a priority above 0, and kubectl
//! drops those unless `-o wide`.
//!
//! This module is pure: it turns JSON objects into JSON tables; the handlers decide when.

mod builtin;
pub mod jsonpath;

use serde_json::{Map, Value, json};

pub use jsonpath::JsonPath;

use super::resources::ResourceType;

/// The `meta.k8s.io` version a client accepts tables in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableVersion {
    /// `meta.k8s.io/v1` (kubectl's first choice).
    V1,
    /// `meta.k8s.io/v1beta1` (older clients).
    V1Beta1,
}

impl TableVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// One clause of an Accept header: media type, parameters and quality.
pub(super) struct Clause<'a> {
    /// The media type, lower case.
    pub(super) media_type: String,
    params: Vec<(String, &'a str)>,
    quality: f32,
}

impl Clause<'_> {
    /// A parameter's value.
    pub(super) fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// How specific the media type is, for ordering clauses of equal quality (`*/*` last).
    fn specificity(&self) -> u8 {
        match self.media_type.split_once('/') {
            Some(("*", _)) => 0,
            Some((_, "*")) => 1,
            _ => 2,
        }
    }
}

/// The clauses of an Accept header in preference order.
pub(super) fn clauses(accept: &str) -> Vec<Clause<'_>> {
    let mut out: Vec<Clause<'_>> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let media_type = parts.next()?.trim().to_ascii_lowercase();
            if media_type.is_empty() {
                return None;
            }
            let params: Vec<(String, &str)> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"')))
                .collect();
            let quality = params.iter().find(|(k, _)| k == "q").and_then(|(_, v)| v.parse().ok()).unwrap_or(1.0);
            Some(Clause { media_type, params, quality })
        })
        .filter(|c| c.quality > 0.0)
        .collect();
    // Preference order as kube-apiserver's negotiation sorts it: quality first, then the more specific type.
    out.sort_by(|a, b| b.quality.total_cmp(&a.quality).then(b.specificity().cmp(&a.specificity())));
    out
}

/// The representation a read asks for with its Accept header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// The object (or list) itself.
    Object,
    /// A server-side printed `Table` (`as=Table`), as kubectl asks for.
    Table(TableVersion),
    /// Only metadata (`as=PartialObjectMetadata` or `as=PartialObjectMetadataList`), as controller-runtime's
    /// metadata-only caches and client-go's metadata client ask for.
    Metadata(TableVersion),
}

/// What an Accept header asks for.
///
/// Clauses are tried in preference order and the first one the server can satisfy wins: a JSON clause with `as`
/// (`Table`, `PartialObjectMetadata` or `PartialObjectMetadataList`), `g=meta.k8s.io` and `v=v1` or `v=v1beta1`
/// means that view; a clause without `as` means the plain object. Clauses this server cannot produce (any `as` in
/// protobuf or YAML, other groups or kinds) are skipped, as kube-apiserver skips what it cannot serve.
pub fn view(accept: &str) -> View {
    for clause in clauses(accept) {
        let Some(target) = clause.param("as") else { return View::Object };
        let json = matches!(clause.media_type.as_str(), "application/json" | "application/*" | "*/*");
        let version = match clause.param("v") {
            Some("v1") => TableVersion::V1,
            Some("v1beta1") => TableVersion::V1Beta1,
            _ => continue,
        };
        if !json || clause.param("g") != Some("meta.k8s.io") {
            continue;
        }
        if target.eq_ignore_ascii_case("Table") {
            return View::Table(version);
        }
        if target.eq_ignore_ascii_case("PartialObjectMetadata")
            || target.eq_ignore_ascii_case("PartialObjectMetadataList")
        {
            return View::Metadata(version);
        }
    }
    View::Object
}

/// Which table version an Accept header asks for, if the server should answer with a table (see [`view`]).
pub fn negotiate(accept: &str) -> Option<TableVersion> {
    match view(accept) {
        View::Table(version) => Some(version),
        View::Object | View::Metadata(_) => None,
    }
}

/// Which `meta.k8s.io` version an Accept header asks metadata only in (see [`view`]).
pub fn metadata_only(accept: &str) -> Option<TableVersion> {
    match view(accept) {
        View::Metadata(version) => Some(version),
        View::Object | View::Table(_) => None,
    }
}

/// An object's `PartialObjectMetadata`.
pub fn partial_metadata(object: &Value, version: TableVersion) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": version.api_version(),
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| Value::Object(Map::new())),
    })
}

/// Whether an Accept header asks for a `Table` this server produces (see [`negotiate`]).
pub fn wants_table(accept: &str) -> bool {
    negotiate(accept).is_some()
}

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object (`null`).
    None,
    /// A `PartialObjectMetadata` with the object's metadata (the default).
    #[default]
    Metadata,
    /// The whole object in the requested version.
    Object,
}

/// Why a table cannot be produced as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrintingError {
    /// `includeObject` is none of `None`, `Metadata`, `Object`.
    #[error(
        "Unable to convert to Table as requested: includeObject: Unsupported value: {0:?}: supported values: \"Metadata\", \"None\", \"Object\""
    )]
    IncludeObject(String),
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter (absent or empty means `Metadata`).
    pub fn parse(value: Option<&str>) -> Result<Self, PrintingError> {
        match value.unwrap_or_default() {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(PrintingError::IncludeObject(other.to_string())),
        }
    }
}

/// How a request wants its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableOptions {
    /// The `meta.k8s.io` version of the `Table`.
    pub version: TableVersion,
    /// What each row carries.
    pub include: IncludeObject,
}

impl TableOptions {
    /// The table a request asks for, from its Accept header and `includeObject`; `None` for the plain object.
    /// `includeObject` is only checked when a table is asked for, as in kube-apiserver.
    pub fn from_request(accept: Option<&str>, include_object: Option<&str>) -> Result<Option<Self>, PrintingError> {
        let Some(version) = accept.and_then(negotiate) else { return Ok(None) };
        Ok(Some(TableOptions { version, include: IncludeObject::parse(include_object)? }))
    }
}

/// One column definition of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// Header, e.g. `Name`, `Age`, `Node Name` (kubectl prints it upper-cased).
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub kind: String,
    /// `name` for the column holding the object's name, otherwise usually empty.
    pub format: String,
    /// What the column shows.
    pub description: String,
    /// 0 for default columns; above 0 for those kubectl shows only with `-o wide`.
    pub priority: i64,
}

impl Column {
    fn new(name: &str, kind: &str, format: &str, priority: i64, description: &str) -> Self {
        Column {
            name: name.to_string(),
            kind: kind.to_string(),
            format: format.to_string(),
            description: description.to_string(),
            priority,
        }
    }

    /// The column as a `TableColumnDefinition`.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const NAME_DESCRIPTION: &str = "The object's name (metadata.name), unique within its namespace for namespaced kinds.";
const AGE_DESCRIPTION: &str = "Time since the object was created (metadata.creationTimestamp).";

fn name_column() -> Column {
    Column::new("Name", "string", "name", 0, NAME_DESCRIPTION)
}

/// A CRD printer column, compiled.
#[derive(Clone, Debug)]
struct CustomColumn {
    /// `None` when the path does not parse: the column stays, its cells are empty.
    path: Option<JsonPath>,
    kind: String,
}

#[derive(Clone, Debug)]
enum Source {
    Custom(Vec<CustomColumn>),
    Builtin(builtin::Builtin),
}

/// The cells of one row, and the row's conditions (pods report `Completed`).
#[derive(Clone, Debug, PartialEq)]
pub struct RowCells {
    /// One value per column: string, integer, number, boolean or null (kubectl prints null as an empty cell).
    pub cells: Vec<Value>,
    /// `TableRowCondition`s, usually none.
    pub conditions: Vec<Value>,
}

/// Turns objects of one type and version into table rows.
#[derive(Clone, Debug)]
pub struct Printer {
    columns: Vec<Column>,
    source: Source,
}

impl Printer {
    /// The printer for objects of `rt` served in `version`.
    pub fn new(rt: &ResourceType, version: &str) -> Self {
        if rt.custom {
            let declared = rt.version(version).map(|v| v.printer_columns.as_slice()).unwrap_or_default();
            Self::custom(declared)
        } else {
            let kind = builtin::Builtin::of(&rt.gr.group, &rt.gr.resource);
            Printer { columns: kind.columns(), source: Source::Builtin(kind) }
        }
    }

    /// The printer for a custom resource version with these `additionalPrinterColumns` (raw CRD JSON). Without
    /// any, kube-apiserver serves an `Age` column from `.metadata.creationTimestamp`.
    pub fn custom(printer_columns: &[Value]) -> Self {
        let defaulted;
        let declared = if printer_columns.is_empty() {
            defaulted = [json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                                "description": AGE_DESCRIPTION})];
            &defaulted[..]
        } else {
            printer_columns
        };
        let mut columns = vec![name_column()];
        let mut compiled = Vec::with_capacity(declared.len());
        for declared in declared {
            let text = |field: &str| declared[field].as_str().unwrap_or_default().to_string();
            let path = text("jsonPath");
            let description = match declared["description"].as_str() {
                Some(d) if !d.is_empty() => d.to_string(),
                _ => format!("The value at {path}."),
            };
            columns.push(Column {
                name: text("name"),
                kind: text("type"),
                format: text("format"),
                description,
                priority: declared["priority"].as_i64().unwrap_or(0),
            });
            compiled.push(CustomColumn { path: JsonPath::parse(&path).ok(), kind: text("type") });
        }
        Printer { columns, source: Source::Custom(compiled) }
    }

    /// The column definitions, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The cells (and row conditions) of one object, with ages measured at `now`.
    pub fn cells(&self, obj: &Value, now: jiff::Timestamp) -> RowCells {
        match &self.source {
            Source::Custom(columns) => {
                let mut cells = Vec::with_capacity(columns.len() + 1);
                cells.push(json!(super::object::name(obj)));
                cells.extend(columns.iter().map(|c| custom_cell(c, obj, now)));
                RowCells { cells, conditions: Vec::new() }
            }
            Source::Builtin(kind) => kind.cells(obj, now),
        }
    }
}

/// A custom column's cell as kube-apiserver's CRD table convertor computes it: the first value the path selects,
/// typed by the column's type; null when nothing is selected or the value does not fit the type.
fn custom_cell(column: &CustomColumn, obj: &Value, now: jiff::Timestamp) -> Value {
    let Some(path) = &column.path else { return Value::Null };
    let Ok(found) = path.find(obj) else { return Value::Null };
    let Some(value) = found.first() else { return Value::Null };
    match (column.kind.as_str(), value) {
        // String columns print whatever was found, the way client-go's JSONPath printer does.
        ("string", value) => Value::String(text(value)),
        ("integer", Value::Number(n)) => {
            // Floats are truncated, as Go's int64(float64) conversion does.
            let truncated = n.as_f64().map(|f| f as i64);
            n.as_i64().or(truncated).map_or(Value::Null, Value::from)
        }
        ("number", Value::Number(n)) => {
            n.as_f64().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
        }
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) if s.is_empty() || s == "null" => json!("<unknown>"),
        ("date", Value::String(s)) => match s.parse::<jiff::Timestamp>() {
            Ok(t) => Value::String(since(t, now)),
            Err(_) => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// A value as text, the way client-go's JSONPath printer writes a single result.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => go_float(n.as_f64().unwrap_or_default()),
        },
        // A nil result prints as Go templates print a missing value.
        Value::Null => "<no value>".to_string(),
        Value::Array(_) | Value::Object(_) => serde_json::to_string(value).unwrap_or_default(),
    }
}

/// A float as Go's `%v` prints it: shortest round-trip digits, exponent form below 1e-4 and from 1e6.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return "0".to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `1.2345e6`.
    let sci = format!("{f:e}");
    let Some((mantissa, exponent)) = sci.split_once('e') else { return sci };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        return format!("{f}");
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// Kubernetes' `duration.HumanDuration`: a short, human-friendly age with two or three significant figures.
pub fn human_duration(nanos: i64) -> String {
    const SECOND: i64 = 1_000_000_000;
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / (60 * SECOND);
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / (3600 * SECOND);
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of `then` at `now` (Go durations saturate at about 292 years).
fn since(then: jiff::Timestamp, now: jiff::Timestamp) -> String {
    let nanos = now.as_nanosecond() - then.as_nanosecond();
    human_duration(i64::try_from(nanos).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX }))
}

/// The age of a timestamp field: `<unknown>` when unset, `<invalid>` when unparsable.
fn age_of(timestamp: Option<&str>, now: jiff::Timestamp) -> String {
    match timestamp.filter(|t| !t.is_empty()) {
        None => "<unknown>".to_string(),
        Some(t) => t.parse::<jiff::Timestamp>().map_or_else(|_| "<invalid>".to_string(), |t| since(t, now)),
    }
}

/// Builds the tables of one request: rows for objects, then the table around them.
#[derive(Clone, Debug)]
pub struct TableBuilder {
    printer: Printer,
    options: TableOptions,
    /// Fixed clock for tests; the real clock otherwise.
    now: Option<jiff::Timestamp>,
}

impl TableBuilder {
    /// A builder for objects of `rt` served in `version`.
    pub fn new(rt: &ResourceType, version: &str, options: TableOptions) -> Self {
        TableBuilder { printer: Printer::new(rt, version), options, now: None }
    }

    /// A builder over a given printer, measuring ages at `now` when given.
    pub fn with_printer(printer: Printer, options: TableOptions, now: Option<jiff::Timestamp>) -> Self {
        TableBuilder { printer, options, now }
    }

    /// The row for one served object (already in the requested version).
    pub fn row(&self, served: &Value) -> Value {
        let RowCells { cells, conditions } = self.printer.cells(served, self.now.unwrap_or_else(jiff::Timestamp::now));
        let object = match self.options.include {
            IncludeObject::None => Value::Null,
            IncludeObject::Object => served.clone(),
            IncludeObject::Metadata => partial_metadata(served, self.options.version),
        };
        let mut row = Map::new();
        row.insert("cells".into(), Value::Array(cells));
        if !conditions.is_empty() {
            row.insert("conditions".into(), Value::Array(conditions));
        }
        row.insert("object".into(), object);
        Value::Object(row)
    }

    /// A table of `rows` with list metadata (`resourceVersion`, `continue`, `remainingItemCount`). Without headers
    /// `columnDefinitions` is null, as in watch events after the first.
    pub fn table(&self, rows: Vec<Value>, metadata: Value, headers: bool) -> Value {
        let columns = if headers {
            Value::Array(self.printer.columns().iter().map(Column::to_json).collect())
        } else {
            Value::Null
        };
        json!({
            "kind": "Table",
            "apiVersion": self.options.version.api_version(),
            "metadata": metadata,
            "columnDefinitions": columns,
            "rows": rows,
        })
    }

    /// The table of a single object (a get, or a watch event): its resourceVersion, one row.
    pub fn object_table(&self, served: &Value, headers: bool) -> Value {
        let mut metadata = Map::new();
        if let Some(rv) = super::object::meta_str(served, "resourceVersion") {
            metadata.insert("resourceVersion".into(), json!(rv));
        }
        self.table(vec![self.row(served)], Value::Object(metadata), headers)
    }
}

#[cfg(test)]
mod tests;
