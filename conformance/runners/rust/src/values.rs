//! The README's "Values" and "Expectations": what a step's arguments and expected values stand
//! for (bindings, namespaced keys, repeats, sequences), and whether a value matches what a
//! scenario expects (plain values, objects field by field, lists element by element, matchers).

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::{Map, Value};

/// The matchers of an expectation.
const OPERATORS: [&str; 7] = ["$gt", "$ge", "$lt", "$le", "$ne", "$len", "$any"];
/// The object forms of a value (not objects to match field by field): their fields.
const FORMS: [&[&str]; 4] = [&["key"], &["raw"], &["repeat", "times"], &["sequence", "count"]];

/// The values of one scenario: its key namespace and what its steps bound with `as`.
#[derive(Debug, Default)]
pub struct Values {
    prefix: String,
    bindings: HashMap<String, Value>,
}

impl Values {
    /// The values of scenario `name` in run `run_id`.
    pub fn new(run_id: &str, name: &str) -> Values {
        Values { prefix: format!("conf/{run_id}/{name}/"), bindings: HashMap::new() }
    }

    /// The namespaced key `conf/<run id>/<scenario>/<name>`.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Binds a step's result to `name`.
    pub fn bind(&mut self, name: &str, result: Value) {
        self.bindings.insert(name.to_owned(), result);
    }

    /// What `value` stands for.
    pub fn resolve(&self, value: &Value) -> Result<Value, String> {
        Ok(match value {
            Value::String(text) => self.resolve_text(text)?,
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.resolve(v)).collect::<Result<_, _>>()?)
            }
            Value::Object(fields) => match form(fields) {
                Some(("key", name)) => Value::String(self.key(text(name)?)),
                Some(("raw", raw)) => raw.clone(),
                Some(("repeat", unit)) => {
                    let times = fields.get("times").and_then(Value::as_u64).ok_or("repeat needs times")?;
                    Value::String(text(unit)?.repeat(usize::try_from(times).map_err(|e| e.to_string())?))
                }
                Some(("sequence", stem)) => {
                    let count = fields.get("count").and_then(Value::as_u64).ok_or("sequence needs count")?;
                    let stem = text(stem)?;
                    Value::Array((0..count).map(|i| Value::String(self.key(&format!("{stem}{i}")))).collect())
                }
                _ => Value::Object(
                    fields
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), self.resolve(v)?)))
                        .collect::<Result<_, String>>()?,
                ),
            },
            other => other.clone(),
        })
    }

    fn resolve_text(&self, text: &str) -> Result<Value, String> {
        if let Some(escaped) = text.strip_prefix("$$") {
            return Ok(Value::String(format!("${escaped}")));
        }
        let Some(path) = text.strip_prefix('$') else { return Ok(Value::String(text.to_owned())) };
        let mut parts = path.split('.');
        let name = parts.next().unwrap_or_default();
        let mut bound = self.bindings.get(name).ok_or_else(|| format!("nothing is bound to {name:?}"))?;
        for part in parts.filter(|p| !p.is_empty()) {
            bound = bound.get(part).ok_or_else(|| format!("{text}: {name} has no field {part:?}"))?;
        }
        Ok(bound.clone())
    }

    /// A `key` or `election` argument: a plain string is a key name (namespaced).
    pub fn key_arg(&self, value: &Value) -> Result<Value, String> {
        match value {
            Value::String(name) if !name.starts_with('$') => Ok(Value::String(self.key(name))),
            other => self.resolve(other),
        }
    }

    /// A `keys` argument: a list of key arguments, or a value standing for one.
    pub fn keys_arg(&self, value: &Value) -> Result<Value, String> {
        match value {
            Value::Array(items) => {
                Ok(Value::Array(items.iter().map(|v| self.key_arg(v)).collect::<Result<_, _>>()?))
            }
            other => self.resolve(other),
        }
    }

    /// Why `actual` does not match `expected` (at `at`, for the message), or `None` if it does.
    pub fn mismatch(&self, expected: &Value, actual: &Value, at: &str) -> Result<Option<String>, String> {
        if let Value::Object(fields) = expected {
            if !fields.is_empty() && fields.keys().all(|k| OPERATORS.contains(&k.as_str())) {
                for (op, operand) in fields {
                    let want = self.resolve(operand)?;
                    if !holds(op, actual, &want) {
                        return Ok(Some(format!("{at}: expected {op} {want}, got {actual}")));
                    }
                }
                return Ok(None);
            }
            if form(fields).is_none() {
                let Value::Object(got) = actual else {
                    return Ok(Some(format!("{at}: expected an object like {expected}, got {actual}")));
                };
                for (name, want) in fields {
                    let field = got.get(name).unwrap_or(&Value::Null);
                    if let Some(problem) = self.mismatch(want, field, &format!("{at}.{name}"))? {
                        return Ok(Some(problem));
                    }
                }
                return Ok(None);
            }
        }
        let want = self.resolve(expected)?;
        if let (Value::Array(wants), Value::Array(got)) = (&want, actual)
            && wants.len() == got.len()
        {
            for (i, (w, a)) in wants.iter().zip(got).enumerate() {
                if let Some(problem) = self.mismatch(w, a, &format!("{at}[{i}]"))? {
                    return Ok(Some(problem));
                }
            }
            return Ok(None);
        }
        Ok((!same(&want, actual)).then(|| format!("{at}: expected {want}, got {actual}")))
    }
}

/// The form an object is written in (`{"key": ..}`, `{"repeat": .., "times": ..}`, ...) and its
/// main field, if it is one.
fn form(fields: &Map<String, Value>) -> Option<(&'static str, &Value)> {
    let shaped =
        |names: &[&str]| fields.len() == names.len() && names.iter().all(|n| fields.contains_key(*n));
    FORMS.into_iter().find(|names| shaped(names)).map(|names| (names[0], &fields[names[0]]))
}

fn text(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| format!("{value} is not a string"))
}

/// Whether two values are the same: numbers as numbers (64-bit integers exactly), lists
/// element by element, objects field by field.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => compare(a, b) == Some(Ordering::Equal),
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The order of two numbers (exact when both are integers) or two strings.
fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
        },
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Whether `actual` compares with `want` as the matcher `op` says.
fn holds(op: &str, actual: &Value, want: &Value) -> bool {
    match op {
        "$any" => true,
        "$ne" => !same(want, actual),
        "$len" => {
            let length = match actual {
                Value::Array(items) => items.len(),
                Value::String(text) => text.chars().count(),
                _ => return false,
            };
            want.as_u64().is_some_and(|n| u64::try_from(length).is_ok_and(|l| l == n))
        }
        _ => {
            let Some(order) = compare(actual, want) else { return false };
            match op {
                "$gt" => order.is_gt(),
                "$ge" => order.is_ge(),
                "$lt" => order.is_lt(),
                "$le" => order.is_le(),
                _ => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn values() -> Values {
        let mut values = Values::new("r1", "s");
        values.bind("a", json!({"owner": "o1", "fence": 7, "fences": [7, 8]}));
        values
    }

    #[test]
    fn forms_stand_for_keys_bindings_and_repeats() {
        let v = values();
        assert_eq!(v.resolve(&json!({"key": "k"})).unwrap(), json!("conf/r1/s/k"));
        assert_eq!(v.resolve(&json!({"raw": ""})).unwrap(), json!(""));
        assert_eq!(v.resolve(&json!({"repeat": "é", "times": 3})).unwrap(), json!("ééé"));
        assert_eq!(
            v.resolve(&json!({"sequence": "k", "count": 2})).unwrap(),
            json!(["conf/r1/s/k0", "conf/r1/s/k1"])
        );
        assert_eq!(v.resolve(&json!("$a.owner")).unwrap(), json!("o1"));
        assert_eq!(v.resolve(&json!("$$text")).unwrap(), json!("$text"));
        assert_eq!(v.resolve(&json!(["$a.fence", {"key": "x"}])).unwrap(), json!([7, "conf/r1/s/x"]));
        assert!(v.resolve(&json!("$nobody")).is_err());
        assert_eq!(v.key_arg(&json!("k")).unwrap(), json!("conf/r1/s/k"));
        assert_eq!(v.keys_arg(&json!(["a", {"raw": "b"}])).unwrap(), json!(["conf/r1/s/a", "b"]));
    }

    #[test]
    fn matchers_compare_numbers_exactly_and_objects_by_their_fields() {
        let v = values();
        let ok = |expected: Value, actual: Value| v.mismatch(&expected, &actual, "x").unwrap().is_none();
        assert!(ok(json!({"$gt": "$a.fence"}), json!(8)));
        assert!(!ok(json!({"$gt": "$a.fence"}), json!(7)));
        assert!(ok(json!({"$ge": 450, "$lt": 10000}), json!(450.5)));
        assert!(ok(json!(9007199254740993_i64), json!(9007199254740993_i64)));
        assert!(!ok(json!(9007199254740993_i64), json!(9007199254740992_i64)), "64-bit integers exactly");
        assert!(ok(json!({"$len": 2}), json!([1, 2])));
        assert!(ok(json!({"info": "a"}), json!({"info": "a", "term": 3})), "extra fields are ignored");
        assert!(!ok(json!({"info": "a"}), json!(null)));
        assert!(ok(json!("$a.owner"), json!("o1")));
        assert!(ok(json!([{"$gt": 0}, 8]), json!([1, 8])));
        assert!(ok(json!({"$any": true}), json!(null)));
        assert!(ok(json!(null), json!(null)) && !ok(json!(null), json!(0)));
        assert!(ok(json!({"key": "k"}), json!("conf/r1/s/k")), "a form is a value, not fields");
    }
}
