//! `cofferdam k8s job` (issue 24): the manifest is a `batch/v1` Job whose container runs
//! the run with the given policy flags and exports its job; bad names and policy values are
//! usage errors. What a cluster would do with it is not checked here (no cluster).

use crate::common::*;

#[test]
fn the_job_manifest_carries_the_policy_and_refuses_bad_input() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["k8s", "job", "--timeout", "30m", "--network", "none"])
        .args([
            "--name",
            "fix-1",
            "--image",
            "reg.example/agent:1",
            "--",
            "make",
            "test",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let m = json_of(&out);
    assert_eq!(m["apiVersion"], "batch/v1");
    assert_eq!(m["kind"], "Job");
    assert_eq!(m["metadata"]["name"], "fix-1");
    let pod = &m["spec"]["template"]["spec"];
    assert_eq!(pod["hostUsers"], false);
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "reg.example/agent:1");
    let script = c["command"][2].as_str().unwrap();
    assert!(
        script.contains("'--network=none' '--timeout=30m' '--' 'make' 'test'"),
        "{script}"
    );
    assert!(script.contains("cofferdam export last -o /export/job.tar.zst"));
    let scoped = s
        .cmd()
        .args(["k8s", "job", "--no-user-namespaces", "--", "true"])
        .output()
        .unwrap();
    let m = json_of(&scoped);
    assert!(m["spec"]["template"]["spec"].get("hostUsers").is_none());
    assert!(
        m["spec"]["template"]["spec"]["containers"][0]["command"][2]
            .as_str()
            .unwrap()
            .contains("'--tier=scoped'")
    );
    for bad in [
        &["--name", "Bad_Name", "--", "true"][..],
        &["--timeout", "soon", "--", "true"],
        &["--"],
    ] {
        let out = s.cmd().args(["k8s", "job"]).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }
}
