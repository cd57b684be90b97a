//! Criterion benchmark: the model populating 1 GiB of anonymous memory with
//! order-0, 64 KiB and 2 MiB folios (see docs/model.md for results).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ptlab_model::{Advice, MapFlags, Model, ModelConfig, Prot, ThpKnob, ThpMode};

const GIB: u64 = 1 << 30;
const BASE: u64 = 0x7f00_0000_0000;

/// Map 1 GiB at a fixed 1 GiB-aligned address and write every page once.
pub fn populate(layout: &str) -> Model {
    let mut m = Model::new(ModelConfig::default());
    let pid = m.main_pid();
    match layout {
        "4K" => {
            m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
        }
        "64K" => {
            m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        }
        _ => {}
    }
    m.mmap(
        pid,
        BASE,
        GIB,
        Prot::READ | Prot::WRITE,
        MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED,
    )
    .unwrap();
    if layout == "2M" {
        m.madvise(pid, BASE, GIB, Advice::HugePage).unwrap();
    }
    m.access_range(pid, BASE, GIB, true, Some(1)).unwrap();
    m
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("populate_1GiB");
    g.sample_size(10);
    for layout in ["4K", "64K", "2M"] {
        g.bench_with_input(BenchmarkId::from_parameter(layout), &layout, |b, l| {
            b.iter(|| populate(l))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
