//! `param NAME = DEFAULT` statements, `RunOptions::params` overrides and
//! per-line hardware-event recording.

use ptlab_model::{ArchKind, HwEvent, ModelConfig};
use ptlab_scenario::{parse, parse_param_value, run, ModelBackend, RunOptions};

fn backend() -> ModelBackend {
    ModelBackend::new(ModelConfig::for_arch(ArchKind::X86_64))
}

const SRC: &str = "param n = 2
param len = 8K
repeat n
  p = mmap len
  write p len
  munmap p len
end
expect maps empty
";

#[test]
fn defaults_and_overrides() {
    let s = parse("t.ptl", SRC).unwrap();
    assert_eq!(
        s.params(),
        vec![
            ("n".to_string(), 1, "2".to_string()),
            ("len".to_string(), 2, "8K".to_string())
        ]
    );
    let opts = RunOptions {
        record_hw: true,
        ..Default::default()
    };
    let r = run(&s, &mut backend(), &opts);
    assert!(r.passed(), "{:?}", r.failures);
    let hw = r.hw.unwrap();
    assert_eq!(hw.total.get(HwEvent::PageFault), 4); // 2 iterations × 2 pages
    let write = hw.lines.iter().find(|l| l.op == "write").unwrap();
    assert_eq!((write.line, write.executions), (5, 2));
    let opts = RunOptions {
        params: vec![("n".into(), "3".into()), ("len".into(), "0x3000".into())],
        record_hw: true,
        ..Default::default()
    };
    let r = run(&s, &mut backend(), &opts);
    assert!(r.passed(), "{:?}", r.failures);
    assert_eq!(r.hw.unwrap().total.get(HwEvent::PageFault), 9);
}

#[test]
fn bad_params_are_reported() {
    let s = parse("t.ptl", SRC).unwrap();
    let opts = RunOptions {
        params: vec![("nn".into(), "3".into())],
        ..Default::default()
    };
    let r = run(&s, &mut backend(), &opts);
    assert!(r.aborted);
    assert!(
        r.failures[0]
            .message
            .contains("--param nn: the scenario declares no such parameter"),
        "{}",
        r.failures[0].message
    );
    assert!(r.failures[0].message.contains("it declares: n, len"));
    assert_eq!(
        s.check_params(&[("n".into(), "1".into()), ("zz".into(), "2".into())]),
        Err("--param zz: the scenario declares no such parameter (it declares: n, len)".into())
    );
    assert_eq!(s.check_params(&[("len".into(), "1".into())]), Ok(()));
    let opts = RunOptions {
        params: vec![("n".into(), "x".into())],
        ..Default::default()
    };
    let r = run(&s, &mut backend(), &opts);
    assert!(r.aborted);
    assert!(
        r.failures[0].message.contains("--param n"),
        "{}",
        r.failures[0].message
    );
    // Without record_hw nothing is recorded.
    assert!(run(&s, &mut backend(), &RunOptions::default()).hw.is_none());
    assert!(parse("t.ptl", "param = 3\n").is_err());
    assert!(parse("t.ptl", "let param = 3\n").is_err());
}

#[test]
fn param_values() {
    assert_eq!(parse_param_value("42"), Ok(42));
    assert_eq!(parse_param_value("0x10"), Ok(16));
    assert_eq!(parse_param_value("0b101"), Ok(5));
    assert_eq!(parse_param_value("1_000"), Ok(1000));
    assert_eq!(parse_param_value("64K"), Ok(65536));
    assert_eq!(parse_param_value("1G"), Ok(1 << 30));
    assert!(parse_param_value("1k").is_err());
    assert!(parse_param_value("").is_err());
    assert!(parse_param_value("100000000T").is_err());
}
