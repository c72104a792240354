//! What a `strobe admin` verb prints: the API's JSON (as a table, or as
//! JSON with `--json`) or a line saying what was done.

use serde_json::Value;

pub(crate) enum Output {
    Json(Value),
    Done(String),
}

impl From<Value> for Output {
    fn from(v: Value) -> Self {
        Output::Json(v)
    }
}

impl Output {
    pub(crate) fn print(self, json: bool) -> anyhow::Result<()> {
        match self {
            Output::Done(msg) => {
                if json {
                    println!("{}", serde_json::json!({ "ok": msg }));
                } else {
                    println!("{msg}");
                }
            }
            Output::Json(v) if json => println!("{}", serde_json::to_string_pretty(&v)?),
            Output::Json(Value::Array(items)) => {
                for i in items {
                    match i {
                        Value::String(s) => println!("{s}"),
                        other => println!("{other}"),
                    }
                }
            }
            Output::Json(Value::Object(map)) => {
                let width = map.keys().map(String::len).max().unwrap_or(0);
                for (k, v) in map {
                    let shown = match v {
                        Value::String(s) => s,
                        Value::Object(_) | Value::Array(_) => serde_json::to_string(&v)?,
                        other => other.to_string(),
                    };
                    println!("{k:width$}  {shown}");
                }
            }
            Output::Json(v) => println!("{v}"),
        }
        Ok(())
    }
}
