//! `/metrics?name[]=…`: only the named families (the query prometheus_client's exporters
//! take). A scrape for a broker-wide gauge need not walk every loaded topic: a whole page
//! renders every topic's series, which at a hundred thousand topics is a cost a sampler of
//! one gauge should not pay (docs/performance.md, "Fewer walks, reads grouped").

/// The families a query names (`name[]=a&name[]=b`, the brackets possibly percent-encoded);
/// empty: the whole page.
pub(crate) fn requested(query: Option<&str>) -> Vec<String> {
    let Some(q) = query else { return Vec::new() };
    q.split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| matches!(*k, "name[]" | "name%5B%5D" | "name%5b%5d"))
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Whether any of `names` is a per-topic family (all of Pulsar's `pulsar_*` but the broker's
/// topic count, and the topics' throttling counters).
pub(crate) fn wants_topics(names: &[String]) -> bool {
    names.iter().any(|n| {
        (n.starts_with("pulsar_") && n != "pulsar_topics_count")
            || matches!(
                n.as_str(),
                "strobe_dispatch_rate_limit_times" | "strobe_subscribe_rate_limit_times"
            )
    })
}

/// The lines of `page` that belong to the families `names`: their HELP and TYPE lines and
/// their samples (a histogram's `_bucket`, `_sum` and `_count` too).
pub(crate) fn keep(page: &str, names: &[String]) -> String {
    let belongs = |name: &str| {
        names.iter().any(|n| {
            name == n
                || name
                    .strip_prefix(n.as_str())
                    .is_some_and(|s| matches!(s, "_bucket" | "_sum" | "_count"))
        })
    };
    let mut out = String::new();
    for line in page.lines() {
        let name = match line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            Some(rest) => rest.split(' ').next().unwrap_or(""),
            None => line.split(['{', ' ']).next().unwrap_or(""),
        };
        if belongs(name) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_families_and_only_their_lines_are_kept() {
        assert!(requested(None).is_empty());
        assert_eq!(
            requested(Some("name[]=a_b&x=1&name%5B%5D=c&name[]=")),
            vec!["a_b".to_string(), "c".to_string()]
        );
        let page = "# HELP a_b x\n# TYPE a_b gauge\na_b 1\n# HELP h y\n# TYPE h histogram\n\
                    h_bucket{le=\"1\"} 2\nh_sum 3\nh_count 2\nh_other 9\nc{t=\"a_b\"} 4\na_bc 5\n";
        assert_eq!(
            keep(page, &["a_b".into(), "h".into()]),
            "# HELP a_b x\n# TYPE a_b gauge\na_b 1\n# HELP h y\n# TYPE h histogram\n\
             h_bucket{le=\"1\"} 2\nh_sum 3\nh_count 2\n"
        );
        assert!(wants_topics(&["pulsar_rate_in".into()]));
        assert!(!wants_topics(&[
            "pulsar_topics_count".into(),
            "strobe_topic_loads_waiting".into()
        ]));
    }
}
