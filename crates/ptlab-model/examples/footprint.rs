//! Populate 1 GiB in each folio layout and print the model's time and
//! memory per populated page (numbers recorded in docs/model.md).
//!
//! cargo run --release -p ptlab-model --example footprint

use ptlab_model::{Advice, MapFlags, Model, ModelConfig, Prot, ThpKnob, ThpMode};
use std::time::Instant;

fn main() {
    const GIB: u64 = 1 << 30;
    const BASE: u64 = 0x7f00_0000_0000;
    for layout in ["4K", "64K", "2M"] {
        let start = Instant::now();
        let mut m = Model::new(ModelConfig::default());
        match layout {
            "4K" => m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap(),
            "64K" => {
                m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
                m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            }
            _ => {}
        }
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, BASE, GIB, Prot::READ | Prot::WRITE, f).unwrap();
        if layout == "2M" {
            m.madvise(1, BASE, GIB, Advice::HugePage).unwrap();
        }
        m.access_range(1, BASE, GIB, true, Some(1)).unwrap();
        let t = start.elapsed();
        let pages = GIB / 4096;
        println!(
            "{layout:>4}: populate 1 GiB in {:>7.1} ms ({:.0} ns/page); model memory {:.2} MiB = {:.1} B/page",
            t.as_secs_f64() * 1e3,
            t.as_nanos() as f64 / pages as f64,
            m.memory_bytes() as f64 / (1 << 20) as f64,
            m.memory_bytes() as f64 / pages as f64
        );
    }
}
