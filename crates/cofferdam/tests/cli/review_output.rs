//! The renderers escape what a crafted bundle carries where a real run cannot easily put
//! hostile text: warnings and denied network names (the escape suite's
//! `rec.review-network-names` sends real ones through the proxy).

use crate::common::{Sandbox, hostile_text, json_of, raw_controls};
use serde_json::json;

#[test]
fn warnings_and_network_names_of_a_bundle_reach_the_review_escaped() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args([
            "run",
            "--json",
            "--tier",
            "scoped",
            "--",
            "sh",
            "-c",
            "echo x > f",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let summary = json_of(&out);
    let path = std::path::PathBuf::from(summary["bundle"].as_str().unwrap());
    let job = summary["job"].as_str().unwrap();
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let h = hostile_text();
    b["run"]["warnings"]
        .as_array_mut()
        .unwrap()
        .push(json!(format!("run {h}")));
    b["safety"]["warnings"]
        .as_array_mut()
        .unwrap()
        .push(json!(format!("safety {h}")));
    b["network"]["intercepted"] = json!({
        "requests": 1, "allowed": 0, "denied": 1, "bytes_sent": 0, "bytes_received": 0,
        "dns": {"answered": 0, "refused": 1}, "tcp_refused_unlistened": 0, "udp_unlistened": 0,
        "destinations": [
            {"host": format!("c{h}.test"), "port": 443, "allowed": 0, "denied": 1,
             "bytes_sent": 0, "bytes_received": 0},
            {"host": format!("d{h}"), "allowed": 0, "denied": 1,
             "bytes_sent": 0, "bytes_received": 0},
        ],
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&b).unwrap()).unwrap();
    let out = s
        .cmd()
        .args(["--color", "always", "status", "--review", job])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("safety \\u{1}") && text.contains("denied"),
        "{text}"
    );
    let raw = raw_controls(&[out.stdout.as_slice(), &out.stderr].concat());
    assert!(raw.is_empty(), "{raw:?}\n{text}");
}
