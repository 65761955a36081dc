//! Table-driven tests of compiling, defaulting, pruning and validating, and checks against the shipped CRDs.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::format::{go_float, go_pattern_to_rust, go_quote};
use super::*;

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("bad YAML in test table: {e}\n{text}"))
}

/// A root schema whose `spec` property is `snippet`: keeps tables short and paths kube-like (`spec.…`).
fn spec_schema(snippet: &str) -> StructuralSchema {
    let schema = json!({ "type": "object", "properties": { "spec": yaml(snippet) } });
    StructuralSchema::compile(&schema).unwrap_or_else(|e| panic!("schema does not compile: {e}\n{snippet}"))
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// (name, schema of `spec`, value of `spec`, expected errors as kube prints them)
type ValidationCase = (&'static str, &'static str, &'static str, &'static [&'static str]);

const VALIDATION: &[ValidationCase] = &[
    // type
    (
        "integer rejects a string",
        "{type: object, properties: {replicas: {type: integer}}}",
        "{replicas: '3'}",
        &[r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#],
    ),
    (
        "integer rejects a fraction",
        "{type: integer}",
        "1.5",
        &[r#"spec: Invalid value: "number": spec in body must be of type integer: "number""#],
    ),
    (
        "integer rejects an integral float",
        "{type: integer}",
        "1.0",
        &[r#"spec: Invalid value: "number": spec in body must be of type integer: "number""#],
    ),
    ("integer accepts an integer", "{type: integer}", "-7", &[]),
    ("number accepts an integer", "{type: number}", "3", &[]),
    ("number accepts a float", "{type: number}", "3.25", &[]),
    (
        "boolean rejects a string",
        "{type: boolean}",
        "'true'",
        &[r#"spec: Invalid value: "string": spec in body must be of type boolean: "string""#],
    ),
    (
        "object rejects an array",
        "{type: object}",
        "[1]",
        &[r#"spec: Invalid value: "array": spec in body must be of type object: "array""#],
    ),
    (
        "array rejects an object",
        "{type: array}",
        "{a: 1}",
        &[r#"spec: Invalid value: "object": spec in body must be of type array: "object""#],
    ),
    (
        "string rejects a number",
        "{type: string}",
        "12",
        &[r#"spec: Invalid value: "integer": spec in body must be of type string: "integer""#],
    ),
    ("untyped accepts anything", "{x-kubernetes-preserve-unknown-fields: true}", "[1, a, {b: null}]", &[]),
    // nullable
    (
        "null is a type error when not nullable",
        "{type: string}",
        "null",
        &[r#"spec: Invalid value: "null": spec in body must be of type string: "null""#],
    ),
    ("null is fine when nullable", "{type: string, nullable: true, minLength: 3}", "null", &[]),
    // required
    (
        "required property missing",
        "{type: object, required: [class, name], properties: {class: {type: string}, name: {type: string}}}",
        "{name: a}",
        &["spec.class: Required value"],
    ),
    (
        "required property present but null",
        "{type: object, required: [class], properties: {class: {type: string}}}",
        "{class: null}",
        &[r#"spec.class: Invalid value: "null": spec.class in body must be of type string: "null""#],
    ),
    // enum
    (
        "enum of strings",
        "{type: object, properties: {strategy: {type: object, properties: {type: {type: string, enum: [Recreate, RollingUpdate]}}}}}",
        "{strategy: {type: Foo}}",
        &[r#"spec.strategy.type: Unsupported value: "Foo": supported values: "Recreate", "RollingUpdate""#],
    ),
    (
        "enum of integers",
        "{type: integer, enum: [1, 2]}",
        "3",
        &[r#"spec: Unsupported value: 3: supported values: "1", "2""#],
    ),
    ("enum compares numbers by value", "{type: number, enum: [1, 2.5]}", "1.0", &[]),
    ("enum member", "{type: string, enum: [a, b]}", "b", &[]),
    // pattern
    (
        "pattern mismatch",
        "{type: string, pattern: '^[a-z]+$'}",
        "Abc",
        &[r#"spec: Invalid value: "Abc": spec in body should match '^[a-z]+$'"#],
    ),
    ("pattern is unanchored", "{type: string, pattern: '[0-9]'}", "abc1def", &[]),
    (
        "pattern \\d is ASCII as in Go",
        r"{type: string, pattern: '^\d+$'}",
        "'١٢'",
        &[r#"spec: Invalid value: "١٢": spec in body should match '^\d+$'"#],
    ),
    ("pattern ignores non-strings", "{x-kubernetes-int-or-string: true, pattern: '^a'}", "5", &[]),
    // format
    (
        "int32 beyond range",
        "{type: integer, format: int32}",
        "2147483648",
        &[r#"spec: Invalid value: 2147483648: spec in body must be of type int32: "2147483648""#],
    ),
    ("int32 lower bound", "{type: integer, format: int32}", "-2147483648", &[]),
    (
        "int64 beyond range",
        "{type: integer, format: int64}",
        "9223372036854775808",
        &[r#"spec: Invalid value: 9223372036854775808: spec in body must be of type int64: "9223372036854775808""#],
    ),
    ("int64 upper bound", "{type: integer, format: int64}", "9223372036854775807", &[]),
    ("date-time RFC 3339", "{type: string, format: date-time}", "'2026-11-30T09:00:00Z'", &[]),
    ("date-time with fraction and offset", "{type: string, format: date-time}", "'2026-11-30t09:00:00.123+01:00'", &[]),
    (
        "date-time with a space",
        "{type: string, format: date-time}",
        "'2026-11-30 09:00:00Z'",
        &[
            r#"spec: Invalid value: "2026-11-30 09:00:00Z": spec in body must be of type date-time: "2026-11-30 09:00:00Z""#,
        ],
    ),
    (
        "date-time on a day that does not exist",
        "{type: string, format: date-time}",
        "'2026-02-30T09:00:00Z'",
        &[
            r#"spec: Invalid value: "2026-02-30T09:00:00Z": spec in body must be of type date-time: "2026-02-30T09:00:00Z""#,
        ],
    ),
    (
        "date-time without zone",
        "{type: string, format: date-time}",
        "'2026-11-30T09:00:00'",
        &[
            r#"spec: Invalid value: "2026-11-30T09:00:00": spec in body must be of type date-time: "2026-11-30T09:00:00""#,
        ],
    ),
    ("date on a leap day", "{type: string, format: date}", "'2024-02-29'", &[]),
    (
        "date on a missing leap day",
        "{type: string, format: date}",
        "'2023-02-29'",
        &[r#"spec: Invalid value: "2023-02-29": spec in body must be of type date: "2023-02-29""#],
    ),
    ("byte is base64", "{type: string, format: byte}", "aGVsbG8=", &[]),
    (
        "byte that is not base64",
        "{type: string, format: byte}",
        "'hello!'",
        &[r#"spec: Invalid value: "hello!": spec in body must be of type byte: "hello!""#],
    ),
    ("uuid", "{type: string, format: uuid}", "3F1E0B52-0000-4000-8000-000000000001", &[]),
    (
        "uuid too short",
        "{type: string, format: uuid}",
        "3f1e0b52-0000-4000-8000",
        &[
            r#"spec: Invalid value: "3f1e0b52-0000-4000-8000": spec in body must be of type uuid: "3f1e0b52-0000-4000-8000""#,
        ],
    ),
    (
        "uuid4 with the wrong version",
        "{type: string, format: uuid4}",
        "3f1e0b52-0000-1000-8000-000000000001",
        &[
            r#"spec: Invalid value: "3f1e0b52-0000-1000-8000-000000000001": spec in body must be of type uuid4: "3f1e0b52-0000-1000-8000-000000000001""#,
        ],
    ),
    ("ipv4", "{type: string, format: ipv4}", "10.0.0.1", &[]),
    (
        "ipv6 given an ipv4",
        "{type: string, format: ipv6}",
        "10.0.0.1",
        &[r#"spec: Invalid value: "10.0.0.1": spec in body must be of type ipv6: "10.0.0.1""#],
    ),
    ("cidr", "{type: string, format: cidr}", "fd00::/64", &[]),
    (
        "cidr prefix too long",
        "{type: string, format: cidr}",
        "10.0.0.0/33",
        &[r#"spec: Invalid value: "10.0.0.0/33": spec in body must be of type cidr: "10.0.0.0/33""#],
    ),
    ("unknown formats are ignored", "{type: string, format: hostname}", "not a host name!", &[]),
    // minimum / maximum / exclusive* / multipleOf
    (
        "minimum",
        "{type: integer, minimum: 0}",
        "-1",
        &["spec: Invalid value: -1: spec in body should be greater than or equal to 0"],
    ),
    ("minimum inclusive", "{type: integer, minimum: 0}", "0", &[]),
    (
        "exclusiveMinimum",
        "{type: integer, minimum: 0, exclusiveMinimum: true}",
        "0",
        &["spec: Invalid value: 0: spec in body should be greater than 0"],
    ),
    (
        "maximum",
        "{type: number, maximum: 10}",
        "10.5",
        &["spec: Invalid value: 10.5: spec in body should be less than or equal to 10"],
    ),
    (
        "exclusiveMaximum",
        "{type: number, maximum: 10, exclusiveMaximum: true}",
        "10",
        &["spec: Invalid value: 10: spec in body should be less than 10"],
    ),
    (
        "large bounds print as Go floats",
        "{type: integer, maximum: 1000000}",
        "2000000",
        &["spec: Invalid value: 2000000: spec in body should be less than or equal to 1e+06"],
    ),
    (
        "multipleOf",
        "{type: integer, multipleOf: 5}",
        "12",
        &["spec: Invalid value: 12: spec in body should be a multiple of 5"],
    ),
    ("multipleOf met", "{type: integer, multipleOf: 5}", "-15", &[]),
    ("multipleOf with a fractional factor", "{type: number, multipleOf: 0.1}", "0.3", &[]),
    (
        "multipleOf with a fractional factor missed",
        "{type: number, multipleOf: 0.25}",
        "0.3",
        &["spec: Invalid value: 0.3: spec in body should be a multiple of 0.25"],
    ),
    // minLength / maxLength
    ("maxLength", "{type: string, maxLength: 3}", "abcd", &["spec: Too long: may not be more than 3 bytes"]),
    ("maxLength of one", "{type: string, maxLength: 1}", "ab", &["spec: Too long: may not be more than 1 byte"]),
    ("maxLength counts characters", "{type: string, maxLength: 3}", "äöü", &[]),
    (
        "minLength",
        "{type: string, minLength: 2}",
        "a",
        &[r#"spec: Invalid value: "a": spec in body should be at least 2 chars long"#],
    ),
    (
        "only the first string failure is reported",
        "{type: string, minLength: 2, pattern: '^[0-9]+$'}",
        "a",
        &[r#"spec: Invalid value: "a": spec in body should be at least 2 chars long"#],
    ),
    // minItems / maxItems / uniqueItems
    ("maxItems", "{type: array, maxItems: 1}", "[1, 2]", &["spec: Too many: 2: must have at most 1 item"]),
    (
        "minItems",
        "{type: array, minItems: 2}",
        "[1]",
        &["spec: Invalid value: 1: spec in body should have at least 2 items"],
    ),
    (
        "uniqueItems",
        "{type: array, uniqueItems: true}",
        "[{a: 1, b: 2}, 3, {b: 2, a: 1}]",
        &["spec: Invalid value: spec in body shouldn't contain duplicates"],
    ),
    ("uniqueItems met", "{type: array, uniqueItems: true}", "[1, '1', [1]]", &[]),
    // minProperties / maxProperties
    (
        "maxProperties",
        "{type: object, maxProperties: 1, additionalProperties: {type: integer}}",
        "{a: 1, b: 2}",
        &["spec: Too many: 2: must have at most 1 item"],
    ),
    (
        "minProperties",
        "{type: object, minProperties: 1, properties: {a: {type: string}}}",
        "{}",
        &["spec: Invalid value: 0: spec in body should have at least 1 properties"],
    ),
    // properties / items / additionalProperties: paths
    (
        "path through properties and items",
        "{type: object, properties: {template: {type: object, properties: {spec: {type: object, properties: {taints: {type: array, items: {type: object, properties: {effect: {type: string, enum: [NoSchedule, NoExecute]}}}}}}}}}}",
        "{template: {spec: {taints: [{effect: NoSchedule}, {effect: Foo}]}}}",
        &[
            r#"spec.template.spec.taints[1].effect: Unsupported value: "Foo": supported values: "NoSchedule", "NoExecute""#,
        ],
    ),
    (
        "path through a map",
        "{type: object, properties: {labels: {type: object, additionalProperties: {type: string, maxLength: 2}}}}",
        "{labels: {ok: ab, foo: abc}}",
        &["spec.labels[foo]: Too long: may not be more than 2 bytes"],
    ),
    (
        "additionalProperties false forbids undeclared keys",
        "{type: object, properties: {a: {type: integer}}, additionalProperties: false}",
        "{a: 1, b: 2}",
        &["spec.b: Forbidden: spec.b in body is a forbidden property"],
    ),
    ("undeclared fields are left to pruning", "{type: object, properties: {a: {type: integer}}}", "{a: 1, b: 2}", &[]),
    (
        "several errors in one object",
        "{type: object, required: [z], properties: {a: {type: integer}, b: {type: string, enum: [x]}}}",
        "{a: x, b: y}",
        &[
            "spec.z: Required value",
            r#"spec.a: Invalid value: "string": spec.a in body must be of type integer: "string""#,
            r#"spec.b: Unsupported value: "y": supported values: "x""#,
        ],
    ),
    // allOf / anyOf / oneOf / not
    (
        "allOf",
        "{type: integer, allOf: [{minimum: 0}, {maximum: 10}]}",
        "11",
        &[
            r#"spec: Invalid value: "spec" must validate all the schemas (allOf)"#,
            "spec: Invalid value: 11: spec in body should be less than or equal to 10",
        ],
    ),
    ("allOf met", "{type: integer, allOf: [{minimum: 0}, {maximum: 10}]}", "10", &[]),
    (
        "anyOf",
        "{type: string, anyOf: [{pattern: '^a'}, {pattern: 'b$'}]}",
        "cc",
        &[
            r#"spec: Invalid value: "spec" must validate at least one schema (anyOf)"#,
            r#"spec: Invalid value: "cc": spec in body should match '^a'"#,
        ],
    ),
    ("anyOf met by the second", "{type: string, anyOf: [{pattern: '^a'}, {pattern: 'b$'}]}", "cb", &[]),
    (
        "oneOf with two matches",
        "{type: integer, oneOf: [{minimum: 0}, {maximum: 10}]}",
        "5",
        &[r#"spec: Invalid value: "spec" must validate one and only one schema (oneOf). Found 2 valid alternatives"#],
    ),
    ("oneOf with one match", "{type: integer, oneOf: [{minimum: 0}, {maximum: 10}]}", "11", &[]),
    (
        "oneOf with none",
        "{type: integer, oneOf: [{minimum: 20}, {maximum: -10}]}",
        "5",
        &[
            r#"spec: Invalid value: "spec" must validate one and only one schema (oneOf). Found none valid"#,
            "spec: Invalid value: 5: spec in body should be greater than or equal to 20",
        ],
    ),
    (
        "not",
        "{type: string, not: {enum: [forbidden]}}",
        "forbidden",
        &[r#"spec: Invalid value: "spec" must not validate the schema (not)"#],
    ),
    ("not met", "{type: string, not: {enum: [forbidden]}}", "fine", &[]),
    // x-kubernetes-int-or-string
    (
        "int-or-string takes an integer",
        "{x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}",
        "1",
        &[],
    ),
    (
        "int-or-string takes a string",
        "{x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}",
        "50%",
        &[],
    ),
    (
        "int-or-string rejects a boolean",
        "{x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}",
        "true",
        &[r#"spec: Invalid value: "boolean": spec in body must be of type integer or string: "boolean""#],
    ),
    (
        "int-or-string rejects a float, even without anyOf",
        "{x-kubernetes-int-or-string: true}",
        "1.5",
        &[r#"spec: Invalid value: "number": spec in body must be of type integer or string: "number""#],
    ),
    // x-kubernetes-preserve-unknown-fields
    (
        "preserve-unknown-fields still validates",
        "{type: object, x-kubernetes-preserve-unknown-fields: true, maxProperties: 1, properties: {a: {type: integer}}}",
        "{a: x, b: 1}",
        &[
            "spec: Too many: 2: must have at most 1 item",
            r#"spec.a: Invalid value: "string": spec.a in body must be of type integer: "string""#,
        ],
    ),
    // x-kubernetes-embedded-resource
    (
        "embedded resource needs apiVersion and kind",
        "{type: object, x-kubernetes-embedded-resource: true, properties: {spec: {type: object}}}",
        "{spec: {}}",
        &["spec.apiVersion: Required value: must not be empty", "spec.kind: Required value: must not be empty"],
    ),
    (
        "embedded resource with malformed apiVersion and kind",
        "{type: object, x-kubernetes-embedded-resource: true}",
        "{apiVersion: a/b/c, kind: Foo_Bar}",
        &[
            r#"spec.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#,
            concat!(
                r#"spec.kind: Invalid value: "Foo_Bar": may have mixed case, but should otherwise match: a DNS-1035 "#,
                "label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, \
                 and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is \
                 '[a-z]([-a-z0-9]*[a-z0-9])?')"
            ),
        ],
    ),
    (
        "embedded resource with empty and non-string fields",
        "{type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}",
        "{apiVersion: '', kind: 5}",
        &[r#"spec.apiVersion: Invalid value: "": must not be empty"#, "spec.kind: Invalid value: 5: must be a string"],
    ),
    (
        "embedded resource well-formed",
        "{x-kubernetes-embedded-resource: true}",
        "{apiVersion: apps/v1, kind: Deployment}",
        &[],
    ),
    (
        "embedded resource with preserved fields may be partial",
        "{type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}",
        "{}",
        &[],
    ),
    (
        "embedded resource must be an object",
        "{x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}",
        "[]",
        &[r#"spec: Invalid value: "array": spec in body must be of type object: "array""#],
    ),
    // x-kubernetes-list-type
    (
        "list-type set",
        "{type: array, x-kubernetes-list-type: set, items: {type: string}}",
        "[a, b, a, a, b]",
        &[r#"spec[2]: Duplicate value: "a""#, r#"spec[4]: Duplicate value: "b""#],
    ),
    (
        "list-type map with one key",
        "{type: array, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [name], items: {type: object, properties: {name: {type: string}, v: {type: integer}}}}",
        "[{name: a, v: 1}, {name: b}, {name: a, v: 2}]",
        &[r#"spec[2]: Duplicate value: {"name":"a"}"#],
    ),
    (
        "list-type map with two keys",
        "{type: array, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [key, effect], items: {type: object, properties: {key: {type: string}, effect: {type: string}}}}",
        "[{key: a, effect: X}, {key: a, effect: Y}, {key: a, effect: X}]",
        &[r#"spec[2]: Duplicate value: {"effect":"X","key":"a"}"#],
    ),
    (
        "list-type map keys default",
        "{type: array, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [protocol], items: {type: object, properties: {protocol: {type: string, default: TCP}, port: {type: integer}}}}",
        "[{port: 1}, {port: 2, protocol: TCP}]",
        &[r#"spec[1]: Duplicate value: {"protocol":"TCP"}"#],
    ),
    (
        "list-type map items must be objects",
        "{type: array, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [name]}",
        "[{name: a}, x]",
        &[r#"spec[1]: Invalid value: "x": must be an object for an array of list-type map"#],
    ),
    ("list-type atomic allows duplicates", "{type: array, x-kubernetes-list-type: atomic}", "[1, 1]", &[]),
    (
        "ignored keywords",
        "{type: object, description: d, title: t, example: {a: 1}, externalDocs: {url: x}, x-kubernetes-map-type: atomic}",
        "{}",
        &[],
    ),
    (
        "CEL rules are not evaluated",
        "{type: string, x-kubernetes-validations: [{rule: 'false', message: never}]}",
        "x",
        &[],
    ),
];

#[test]
fn validation_table() {
    for (name, snippet, spec, expected) in VALIDATION {
        let schema = spec_schema(snippet);
        let object = json!({ "spec": yaml(spec) });
        let errors = schema.validate(&object);
        assert_eq!(messages(&errors), expected.iter().map(ToString::to_string).collect::<Vec<_>>(), "case {name:?}");
    }
}

/// (name, schema of `spec`, object before, object after)
type MutationCase = (&'static str, &'static str, &'static str, &'static str);

const DEFAULTING: &[MutationCase] = &[
    (
        "missing property",
        "{type: object, properties: {replicas: {type: integer, default: 1}}}",
        "{spec: {}}",
        "{spec: {replicas: 1}}",
    ),
    (
        "present property wins",
        "{type: object, properties: {replicas: {type: integer, default: 1}}}",
        "{spec: {replicas: 0}}",
        "{spec: {replicas: 0}}",
    ),
    (
        "defaults inside a default",
        "{type: object, properties: {class: {type: object, default: {}, properties: {kind: {type: string, default: MachineClass}, name: {type: string}}}}}",
        "{spec: {}}",
        "{spec: {class: {kind: MachineClass}}}",
    ),
    (
        "nested defaults in given objects",
        "{type: object, properties: {a: {type: object, properties: {b: {type: object, properties: {c: {type: string, default: x}}}}}}}",
        "{spec: {a: {b: {}}}}",
        "{spec: {a: {b: {c: x}}}}",
    ),
    (
        "no parent is created for a nested default",
        "{type: object, properties: {a: {type: object, properties: {c: {type: string, default: x}}}}}",
        "{spec: {}}",
        "{spec: {}}",
    ),
    (
        "null with a default",
        "{type: object, properties: {a: {type: integer, default: 3}}}",
        "{spec: {a: null}}",
        "{spec: {a: 3}}",
    ),
    (
        "null without a default is dropped",
        "{type: object, properties: {a: {type: integer}}}",
        "{spec: {a: null, b: null}}",
        "{spec: {b: null}}",
    ),
    (
        "null stays when nullable",
        "{type: object, properties: {a: {type: integer, nullable: true, default: 3}}}",
        "{spec: {a: null}}",
        "{spec: {a: null}}",
    ),
    ("root default", "{type: object, default: {replicas: 1}}", "{kind: X}", "{kind: X, spec: {replicas: 1}}"),
    (
        "array items",
        "{type: array, items: {type: object, properties: {a: {type: integer, default: 1}}}}",
        "{spec: [{}, {a: 2}]}",
        "{spec: [{a: 1}, {a: 2}]}",
    ),
    (
        "null array item with a default",
        "{type: array, items: {type: string, default: x}}",
        "{spec: [null, y]}",
        "{spec: [x, y]}",
    ),
    ("null array item without a default", "{type: array, items: {type: string}}", "{spec: [null]}", "{spec: [null]}"),
    (
        "map values",
        "{type: object, additionalProperties: {type: object, properties: {a: {type: integer, default: 1}}}}",
        "{spec: {x: {}, y: {a: 2}, z: null}}",
        "{spec: {x: {a: 1}, y: {a: 2}, z: null}}",
    ),
    (
        "null map value with a default",
        "{type: object, additionalProperties: {type: object, default: {a: 0}, properties: {a: {type: integer}, b: {type: integer, default: 5}}}}",
        "{spec: {x: null}}",
        "{spec: {x: {a: 0, b: 5}}}",
    ),
    (
        "below preserve-unknown-fields",
        "{type: object, x-kubernetes-preserve-unknown-fields: true, properties: {a: {type: integer, default: 1}}}",
        "{spec: {other: {deep: 1}}}",
        "{spec: {a: 1, other: {deep: 1}}}",
    ),
    (
        "values of the wrong type are left alone",
        "{type: object, properties: {a: {type: object, properties: {b: {type: integer, default: 1}}}}}",
        "{spec: {a: text}}",
        "{spec: {a: text}}",
    ),
];

#[test]
fn defaulting_table() {
    for (name, snippet, before, after) in DEFAULTING {
        let schema = spec_schema(snippet);
        let mut object = yaml(before);
        schema.apply_defaults(&mut object);
        assert_eq!(object, yaml(after), "case {name:?}");
    }
}

const PRUNING: &[MutationCase] = &[
    (
        "unknown fields go, the root's apiVersion, kind and metadata stay untouched",
        "{type: object, properties: {a: {type: integer}}}",
        "{apiVersion: v1, kind: X, metadata: {name: n, bogus: {deep: 1}}, spec: {a: 1, b: 2}, extra: 1}",
        "{apiVersion: v1, kind: X, metadata: {name: n, bogus: {deep: 1}}, spec: {a: 1}}",
    ),
    (
        "inside array items",
        "{type: array, items: {type: object, properties: {a: {type: integer}}}}",
        "{spec: [{a: 1, b: 2}, {c: 3}]}",
        "{spec: [{a: 1}, {}]}",
    ),
    ("array without items schema", "{type: array}", "{spec: [{a: 1}, 2, [{b: 1}]]}", "{spec: [{}, 2, [{}]]}"),
    (
        "preserve-unknown-fields keeps unknown, prunes declared",
        "{type: object, x-kubernetes-preserve-unknown-fields: true, properties: {a: {type: object, properties: {x: {type: integer}}}}}",
        "{spec: {a: {x: 1, y: 2}, z: {deep: 3}}}",
        "{spec: {a: {x: 1}, z: {deep: 3}}}",
    ),
    (
        "preserve-unknown-fields on an array keeps its items' unknown fields",
        "{type: array, x-kubernetes-preserve-unknown-fields: true, items: {type: object, properties: {a: {type: object, properties: {x: {type: integer}}}}}}",
        "{spec: [{a: {x: 1, y: 2}, z: 3}]}",
        "{spec: [{a: {x: 1}, z: 3}]}",
    ),
    (
        "embedded resource keeps apiVersion, kind, metadata",
        "{type: object, properties: {template: {type: object, x-kubernetes-embedded-resource: true, properties: {spec: {type: object, properties: {x: {type: integer}}}}}}}",
        "{spec: {template: {apiVersion: v1, kind: Pod, metadata: {name: p, foo: bar}, spec: {x: 1, y: 2}, extra: 1}}}",
        "{spec: {template: {apiVersion: v1, kind: Pod, metadata: {name: p, foo: bar}, spec: {x: 1}}}}",
    ),
    (
        "embedded resource drops a non-string kind",
        "{type: object, x-kubernetes-embedded-resource: true}",
        "{spec: {apiVersion: v1, kind: 5}}",
        "{spec: {apiVersion: v1}}",
    ),
    (
        "embedded resource with preserved fields",
        "{type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true, properties: {spec: {type: object, properties: {x: {type: integer}}}}}",
        "{spec: {apiVersion: v1, kind: Pod, metadata: {a: 1}, spec: {x: 1, y: 2}, status: {s: 1}}}",
        "{spec: {apiVersion: v1, kind: Pod, metadata: {a: 1}, spec: {x: 1}, status: {s: 1}}}",
    ),
    (
        "map values are pruned by additionalProperties",
        "{type: object, properties: {labels: {type: object, additionalProperties: {type: object, properties: {keep: {type: integer}}}}}}",
        "{spec: {labels: {a: {keep: 1, drop: 2}}}}",
        "{spec: {labels: {a: {keep: 1}}}}",
    ),
    (
        "additionalProperties true keeps keys but not their object contents",
        "{type: object, additionalProperties: true}",
        "{spec: {a: 1, b: {c: 1}, d: [x]}}",
        "{spec: {a: 1, b: {}, d: [x]}}",
    ),
    (
        "nulls: dropped when not nullable and without default",
        "{type: object, properties: {a: {type: integer}, b: {type: integer, nullable: true}, c: {type: integer, default: 1}}}",
        "{spec: {a: null, b: null, c: null}}",
        "{spec: {b: null, c: null}}",
    ),
    (
        "root metadata is untouched even when declared",
        "{type: object}",
        "{metadata: {name: n, labels: {a: b}, unknown: 1}}",
        "{metadata: {name: n, labels: {a: b}, unknown: 1}}",
    ),
    (
        "scalars of the wrong type are kept for validation",
        "{type: object, properties: {a: {type: integer}}}",
        "{spec: 5}",
        "{spec: 5}",
    ),
];

#[test]
fn pruning_table() {
    for (name, snippet, before, after) in PRUNING {
        let schema = spec_schema(snippet);
        let mut object = yaml(before);
        schema.prune(&mut object);
        assert_eq!(object, yaml(after), "case {name:?}");
    }
}

#[test]
fn root_preserving_unknown_fields_keeps_everything() {
    let schema = StructuralSchema::compile(&yaml(
        "{type: object, x-kubernetes-preserve-unknown-fields: true, properties: {spec: {type: object, properties: {a: {type: integer}}}}}",
    ))
    .unwrap();
    let mut object = yaml("{apiVersion: v1, kind: X, metadata: {x: 1}, spec: {a: 1, b: 2}, other: 3}");
    schema.prune(&mut object);
    assert_eq!(object, yaml("{apiVersion: v1, kind: X, metadata: {x: 1}, spec: {a: 1}, other: 3}"));
}

#[test]
fn normalize_defaults_then_prunes_then_validates_clean() {
    let schema = spec_schema(
        "{type: object, required: [replicas], properties: {replicas: {type: integer, default: 1, minimum: 0}, mode: {type: string}}}",
    );
    let mut object = yaml("{apiVersion: v1, kind: X, metadata: {name: a}, spec: {mode: null, junk: 1}}");
    assert_eq!(
        messages(&schema.validate(&object)),
        [
            r#"spec.replicas: Required value"#,
            r#"spec.mode: Invalid value: "null": spec.mode in body must be of type string: "null""#
        ]
    );
    schema.normalize(&mut object);
    assert_eq!(object, yaml("{apiVersion: v1, kind: X, metadata: {name: a}, spec: {replicas: 1}}"));
    assert_eq!(schema.validate(&object), []);
}

/// (name, schema, expected error message)
const COMPILE_ERRORS: &[(&str, &str, &str)] = &[
    ("not an object", "[]", "openAPIV3Schema: must be a schema object"),
    ("property not an object", "{properties: {spec: 5}}", "openAPIV3Schema.properties[spec]: must be a schema object"),
    (
        "bad pattern",
        "{properties: {spec: {properties: {name: {type: string, pattern: '(a'}}}}}",
        r#"openAPIV3Schema.properties[spec].properties[name].pattern: invalid regular expression "(a""#,
    ),
    (
        "unknown type",
        "{properties: {spec: {type: foo}}}",
        r#"openAPIV3Schema.properties[spec].type: unsupported type "foo""#,
    ),
    ("type list", "{type: [string, integer]}", "openAPIV3Schema.type: must be a string"),
    (
        "negative minLength",
        "{type: string, minLength: -1}",
        "openAPIV3Schema.minLength: must be a non-negative integer",
    ),
    ("tuple items", "{type: array, items: [{type: string}]}", "openAPIV3Schema.items: must be a schema object"),
    ("bad items schema", "{type: array, items: {type: 3}}", "openAPIV3Schema.items.type: must be a string"),
    (
        "list-type map without keys",
        "{type: array, x-kubernetes-list-type: map}",
        "openAPIV3Schema.x-kubernetes-list-map-keys: must be non-empty for list-type map",
    ),
    (
        "unknown list-type",
        "{type: array, x-kubernetes-list-type: bag}",
        r#"openAPIV3Schema.x-kubernetes-list-type: unsupported value "bag""#,
    ),
    ("zero multipleOf", "{type: integer, multipleOf: 0}", "openAPIV3Schema.multipleOf: must be greater than 0"),
    ("required of non-strings", "{type: object, required: [1]}", "openAPIV3Schema.required: must hold strings only"),
    (
        "exclusiveMinimum as a number",
        "{type: integer, exclusiveMinimum: 3}",
        "openAPIV3Schema.exclusiveMinimum: must be a boolean",
    ),
    ("bad anyOf member", "{anyOf: [{type: integer}, 3]}", "openAPIV3Schema.anyOf[1]: must be a schema object"),
    ("bad not", "{not: {pattern: '['}}", "openAPIV3Schema.not.pattern: invalid regular expression"),
    (
        "bad additionalProperties",
        "{type: object, additionalProperties: {maxItems: x}}",
        "openAPIV3Schema.additionalProperties.maxItems: must be a non-negative integer",
    ),
];

#[test]
fn compile_error_table() {
    for (name, schema, expected) in COMPILE_ERRORS {
        let error = StructuralSchema::compile(&yaml(schema)).expect_err(name).to_string();
        assert!(error.starts_with(expected), "case {name:?}: got {error:?}, want {expected:?}");
    }
}

#[test]
fn cel_rules_are_counted_everywhere() {
    let schema = StructuralSchema::compile(&yaml(
        "{type: object, x-kubernetes-validations: [{rule: a}], properties: {spec: {type: array, items: {type: string, x-kubernetes-validations: [{rule: b}, {rule: c}]}}, m: {type: object, additionalProperties: {type: string, x-kubernetes-validations: [{rule: d}]}}}}",
    ))
    .unwrap();
    assert_eq!(schema.skipped_cel_rules(), 4);
    assert_eq!(spec_schema("{type: string}").skipped_cel_rules(), 0);
}

#[test]
fn schemas_are_cheap_to_share_between_threads() {
    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}
    assert_send_sync_clone::<StructuralSchema>();
    let schema = spec_schema("{type: string}");
    let copy = schema.clone();
    assert!(Arc::ptr_eq(&schema.root, &copy.root));
}

#[test]
fn field_error_formats() {
    let error = |error_type, bad_value: Option<Value>, detail: &str| FieldError {
        field: "spec.x".to_owned(),
        error_type,
        bad_value,
        detail: detail.to_owned(),
    };
    let cases = [
        (
            error(FieldErrorType::Invalid, Some(json!("a\"b\n")), "bad"),
            r#"spec.x: Invalid value: "a\"b\n": bad"#,
            "FieldValueInvalid",
        ),
        (
            error(FieldErrorType::Invalid, Some(json!(null)), "bad"),
            "spec.x: Invalid value: null: bad",
            "FieldValueInvalid",
        ),
        (error(FieldErrorType::Invalid, Some(json!(0.5)), ""), "spec.x: Invalid value: 0.5", "FieldValueInvalid"),
        (
            error(FieldErrorType::Invalid, Some(json!({"a": [1]})), "x"),
            r#"spec.x: Invalid value: {"a":[1]}: x"#,
            "FieldValueInvalid",
        ),
        (error(FieldErrorType::Required, Some(json!("ignored")), ""), "spec.x: Required value", "FieldValueRequired"),
        (
            error(FieldErrorType::NotSupported, Some(json!(true)), "supported values: \"a\""),
            r#"spec.x: Unsupported value: true: supported values: "a""#,
            "FieldValueNotSupported",
        ),
        (
            error(FieldErrorType::TooLong, Some(json!("long")), "may not be more than 2 bytes"),
            "spec.x: Too long: may not be more than 2 bytes",
            "FieldValueTooLong",
        ),
        (
            error(FieldErrorType::TooMany, Some(json!(3)), "must have at most 2 items"),
            "spec.x: Too many: 3: must have at most 2 items",
            "FieldValueTooMany",
        ),
        (
            error(FieldErrorType::Duplicate, Some(json!("a")), ""),
            r#"spec.x: Duplicate value: "a""#,
            "FieldValueDuplicate",
        ),
        (error(FieldErrorType::Forbidden, None, "no"), "spec.x: Forbidden: no", "FieldValueForbidden"),
        (
            error(FieldErrorType::TypeInvalid, Some(json!("string")), "d"),
            r#"spec.x: Invalid value: "string": d"#,
            "FieldValueTypeInvalid",
        ),
    ];
    for (error, display, reason) in cases {
        assert_eq!(error.to_string(), display);
        assert_eq!(format!("{}: {}", error.field, error.body()), display);
        assert_eq!(error.error_type.reason(), reason);
    }
    let root = FieldError { field: String::new(), ..error(FieldErrorType::Required, None, "") };
    assert_eq!(root.to_string(), "<nil>: Required value");
}

#[test]
fn go_number_and_string_formatting() {
    let floats = [
        (0.0, "0"),
        (0.5, "0.5"),
        (-1.5, "-1.5"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1_000_000.0, "1e+06"),
        (2_147_483_647.0, "2.147483647e+09"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5e300, "1.5e+300"),
    ];
    for (f, expected) in floats {
        assert_eq!(go_float(f), expected, "{f}");
    }
    let strings =
        [("plain", r#""plain""#), ("tab\there", r#""tab\there""#), ("\u{1}", r#""\x01""#), ("ünï", r#""ünï""#)];
    for (s, expected) in strings {
        let mut out = String::new();
        go_quote(s, &mut out);
        assert_eq!(out, expected);
    }
}

#[test]
fn go_patterns_mean_what_they_mean_in_go() {
    // (Go pattern, input, matches)
    let cases = [
        (r"^\d+$", "123", true),
        (r"^\d+$", "١٢٣", false),
        (r"^\D+$", "é", true),
        (r"^\w+$", "abc_1", true),
        (r"^\w+$", "äbc", false),
        (r"^\W$", "ä", true),
        (r"^\s$", "\u{a0}", false),
        (r"^\S$", "\u{a0}", true),
        (r"^[\d.]+$", "1.2", true),
        (r"^[\w-]+$", "a-b", true),
        (r"^[a[]+$", "a[", true),
        (r"^[]a]+$", "]a", true),
        (r"^[^]a]+$", "b", true),
        (r"^[a&&b]+$", "&&", true),
        (r"^[a--]+$", "a-", true),
        (r"^[~~]+$", "~", true),
        (r"^[[:alpha:]]+$", "ab", true),
        (r"^[[:alpha:]]+$", "a1", false),
        (r"^a\.b$", "a.b", true),
        (r"^a\.b$", "axb", false),
        (r"\\d", r"\d", true),
    ];
    for (pattern, input, matches) in cases {
        let rust = go_pattern_to_rust(pattern);
        let regex = regex::Regex::new(&rust).unwrap_or_else(|e| panic!("{pattern} -> {rust}: {e}"));
        assert_eq!(regex.is_match(input), matches, "{pattern} (as {rust}) on {input:?}");
    }
}

// --- The shipped CRDs and example objects ---------------------------------------------------------------------------

fn repo_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_files(dir: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            (name, yaml(&text))
        })
        .collect()
}

/// The `openAPIV3Schema` of `version` in a CRD document.
fn version_schema(crd: &Value, version: &str) -> Value {
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("no version {version} in {}", crd["metadata"]["name"]))["schema"]["openAPIV3Schema"]
        .clone()
}

/// The compiled schema serving `apiVersion`/`kind`, from `crds/`.
fn schema_for(api_version: &str, kind: &str) -> StructuralSchema {
    let (group, version) = api_version.split_once('/').unwrap();
    let crds = yaml_files("crds");
    let (_, crd) = crds
        .iter()
        .find(|(_, crd)| crd["spec"]["group"] == group && crd["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no CRD for {api_version} {kind}"));
    StructuralSchema::compile(&version_schema(crd, version)).unwrap()
}

fn crd_schema(file: &str, version: &str) -> StructuralSchema {
    let crd = yaml(&repo_file(&format!("crds/{file}")));
    StructuralSchema::compile(&version_schema(&crd, version)).unwrap()
}

#[test]
fn every_shipped_crd_version_compiles() {
    let crds = yaml_files("crds");
    assert!(crds.len() >= 13, "found only {} CRDs", crds.len());
    for (file, crd) in &crds {
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let schema = &version["schema"]["openAPIV3Schema"];
            if let Err(e) = StructuralSchema::compile(schema) {
                panic!("{file} {}: {e}", version["name"]);
            }
        }
    }
}

#[test]
fn cel_rules_of_shipped_crds_are_counted() {
    let expected_rules = |file: &str, version: &str| -> usize {
        // Count `rule:` entries in the version's YAML directly, independently of the compiler.
        let crd = yaml(&repo_file(&format!("crds/{file}")));
        serde_yaml::to_string(&version_schema(&crd, version)).unwrap().matches("rule:").count()
    };
    let clusters = crd_schema("cluster.x-k8s.io_clusters.yaml", "v1beta2");
    assert!(clusters.skipped_cel_rules() > 0);
    assert_eq!(clusters.skipped_cel_rules(), expected_rules("cluster.x-k8s.io_clusters.yaml", "v1beta2"));
    assert_eq!(crd_schema("machine.sapcloud.io_machines.yaml", "v1alpha1").skipped_cel_rules(), 0);
}

#[test]
fn example_objects_are_valid_and_survive_pruning() {
    let objects = yaml_files("testdata/objects");
    assert!(objects.len() >= 7, "found only {} objects", objects.len());
    for (file, object) in objects {
        let schema = schema_for(object["apiVersion"].as_str().unwrap(), object["kind"].as_str().unwrap());
        let mut pruned = object.clone();
        schema.prune(&mut pruned);
        assert_eq!(pruned, object, "{file}: pruning removed something");
        let mut normalized = object.clone();
        schema.normalize(&mut normalized);
        assert_eq!(messages(&schema.validate(&normalized)), Vec::<String>::new(), "{file}");
        assert_eq!(messages(&schema.validate(&object)), Vec::<String>::new(), "{file} before defaulting");
    }
}

fn example(file: &str) -> Value {
    yaml(&repo_file(&format!("testdata/objects/{file}")))
}

/// Applies `edit` to the example object, normalizes and validates it against its CRD.
fn errors_after(file: &str, edit: impl FnOnce(&mut Value)) -> Vec<String> {
    let mut object = example(file);
    let schema = schema_for(object["apiVersion"].as_str().unwrap(), object["kind"].as_str().unwrap());
    edit(&mut object);
    schema.normalize(&mut object);
    messages(&schema.validate(&object))
}

#[test]
fn capi_machine_violations() {
    type Edit = fn(&mut Value);
    let cases: &[(&str, Edit, &[&str])] = &[
        (
            "missing clusterName",
            |o| drop(o["spec"].as_object_mut().unwrap().remove("clusterName")),
            &["spec.clusterName: Required value"],
        ),
        (
            "clusterName too long",
            |o| o["spec"]["clusterName"] = json!("x".repeat(64)),
            &["spec.clusterName: Too long: may not be more than 63 bytes"],
        ),
        (
            "unsupported taint effect",
            |o| o["spec"]["taints"][0]["effect"] = json!("Foo"),
            &[
                r#"spec.taints[0].effect: Unsupported value: "Foo": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#,
            ],
        ),
        (
            "duplicate taint",
            |o| {
                let taint = o["spec"]["taints"][0].clone();
                o["spec"]["taints"].as_array_mut().unwrap().push(taint);
            },
            &[r#"spec.taints[1]: Duplicate value: {"effect":"NoExecute","key":"dedicated"}"#],
        ),
        (
            "same taint key with another effect is fine",
            |o| {
                let mut taint = o["spec"]["taints"][0].clone();
                taint["effect"] = json!("NoSchedule");
                o["spec"]["taints"].as_array_mut().unwrap().push(taint);
            },
            &[],
        ),
        (
            "minReadySeconds negative",
            |o| o["spec"]["minReadySeconds"] = json!(-1),
            &[
                "spec.minReadySeconds: Invalid value: -1: spec.minReadySeconds in body should be greater than or equal to 0",
            ],
        ),
        (
            "minReadySeconds a string",
            |o| o["spec"]["minReadySeconds"] = json!("10"),
            &[
                r#"spec.minReadySeconds: Invalid value: "string": spec.minReadySeconds in body must be of type integer: "string""#,
            ],
        ),
        (
            "infrastructureRef kind pattern",
            |o| o["spec"]["infrastructureRef"]["kind"] = json!("MCM_Machine"),
            &[
                r#"spec.infrastructureRef.kind: Invalid value: "MCM_Machine": spec.infrastructureRef.kind in body should match '^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$'"#,
            ],
        ),
        (
            "condition time not RFC 3339",
            |o| o["status"]["conditions"][0]["lastTransitionTime"] = json!("yesterday"),
            &[
                r#"status.conditions[0].lastTransitionTime: Invalid value: "yesterday": status.conditions[0].lastTransitionTime in body must be of type date-time: "yesterday""#,
            ],
        ),
        (
            "null for a required field is dropped, then missing",
            |o| o["spec"]["infrastructureRef"]["name"] = Value::Null,
            &["spec.infrastructureRef.name: Required value"],
        ),
        ("unknown fields are pruned, not rejected", |o| o["spec"]["bogus"] = json!({"x": 1}), &[]),
        (
            "empty readinessGates violate minItems",
            |o| o["spec"]["readinessGates"] = json!([]),
            &["spec.readinessGates: Invalid value: 0: spec.readinessGates in body should have at least 1 items"],
        ),
        (
            "empty deletion violates minProperties",
            |o| o["spec"]["deletion"] = json!({}),
            &["spec.deletion: Invalid value: 0: spec.deletion in body should have at least 1 properties"],
        ),
        (
            "observedGeneration beyond int64",
            |o| o["status"]["observedGeneration"] = json!(u64::MAX),
            &[
                r#"status.observedGeneration: Invalid value: 18446744073709551615: status.observedGeneration in body must be of type int64: "18446744073709551615""#,
            ],
        ),
    ];
    for (name, edit, expected) in cases {
        assert_eq!(errors_after("capi-machine.yaml", edit), expected.to_vec(), "case {name:?}");
    }
}

#[test]
fn capi_machinedeployment_int_or_string() {
    let set = |value: Value| move |o: &mut Value| o["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxSurge"] = value;
    assert_eq!(errors_after("capi-machinedeployment.yaml", set(json!("25%"))), Vec::<String>::new());
    assert_eq!(errors_after("capi-machinedeployment.yaml", set(json!(2))), Vec::<String>::new());
    assert_eq!(
        errors_after("capi-machinedeployment.yaml", set(json!(true))),
        [
            r#"spec.rollout.strategy.rollingUpdate.maxSurge: Invalid value: "boolean": spec.rollout.strategy.rollingUpdate.maxSurge in body must be of type integer or string: "boolean""#
        ]
    );
}

#[test]
fn mcm_defaults_and_nullables() {
    let schema = crd_schema("machine.sapcloud.io_machines.yaml", "v1alpha1");
    let mut machine = example("mcm-machine.yaml");
    machine["spec"].as_object_mut().unwrap().remove("class");
    machine["spec"]["creationTimeout"] = Value::Null; // nullable: kept
    machine["spec"]["nodeTemplate"]["metadata"]["anything"] = json!({"goes": true}); // preserved
    schema.normalize(&mut machine);
    assert_eq!(machine["spec"]["class"], json!({}), "class defaults to {{}}");
    assert_eq!(machine["spec"]["creationTimeout"], Value::Null);
    assert_eq!(machine["spec"]["nodeTemplate"]["metadata"]["anything"], json!({"goes": true}));
    assert_eq!(schema.validate(&machine), []);

    let schema = crd_schema("machine.sapcloud.io_machinedeployments.yaml", "v1alpha1");
    let mut deployment = example("mcm-machinedeployment.yaml");
    deployment["spec"]["rollbackTo"] = json!({});
    deployment["spec"]["template"]["spec"].as_object_mut().unwrap().remove("class");
    schema.normalize(&mut deployment);
    assert_eq!(deployment["spec"]["rollbackTo"], json!({"revision": 0}));
    assert_eq!(deployment["spec"]["template"]["spec"]["class"], json!({}));
    assert_eq!(schema.validate(&deployment), []);
}

#[test]
fn mcm_machine_class_keeps_its_provider_spec() {
    let object = example("mcm-machineclass.yaml");
    let schema = schema_for("machine.sapcloud.io/v1alpha1", "MachineClass");
    let mut pruned = object.clone();
    pruned["bogus"] = json!(1);
    schema.normalize(&mut pruned);
    assert_eq!(pruned, object);
}
