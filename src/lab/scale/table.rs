//! The benchmark's table: a column per world (its layout and server), each figure the median
//! of that world's runs, with the runs' spread beside it.
//!
//! Expected flow: the benchmark measures every world `--runs` times ([`super::Figures`] each)
//! → [`print`] reduces each row's figures over the runs and prints one Markdown table.
//!
//! Guarantees: with one run a cell is that run's figure; with more, each figure is the median
//! of the runs (the lower middle one of an even count) followed by its spread — (largest −
//! smallest) ÷ median, in per cent — and a spread over [`FLAGGED_SPREAD`] per cent is marked
//! `⚑`, so a figure that does not repeat is not read as one that does. A ratio between two
//! columns (the fleet ÷ one cluster, the real server ÷ the simulated) is taken run by run,
//! then reduced.
//!
//! Caveats: the p99 of fewer than 100 `--samples` is each run's slowest sample, so one slow
//! moment of a shared machine is a run's p99; the table says under it which sample a p99
//! is. The simulator's records are read to the microsecond (until 2026-12-01 to the
//! millisecond, which put ±1 ms on a floor of 2–3 ms).

use std::time::Duration;

use super::floor::Floor;
use super::world::ServerKind;
use super::{Figures, mb, percentile};

/// The spread, in per cent of the median, past which a figure is flagged as not repeatable.
pub(super) const FLAGGED_SPREAD: f64 = 20.0;

/// How a figure is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Ms,
    Times,
    Count,
    Mean,
    Mb,
    Secs,
}

/// One figure of one run.
#[derive(Debug, Clone, Copy)]
struct Figure {
    value: f64,
    unit: Unit,
}

impl Figure {
    fn ms(d: Duration) -> Self {
        Figure {
            value: d.as_secs_f64() * 1000.0,
            unit: Unit::Ms,
        }
    }

    fn secs(d: Duration) -> Self {
        Figure {
            value: d.as_secs_f64(),
            unit: Unit::Secs,
        }
    }

    fn count(n: u64) -> Self {
        Figure {
            value: n as f64,
            unit: Unit::Count,
        }
    }

    fn mb(kib: u64) -> Self {
        Figure {
            value: mb(kib),
            unit: Unit::Mb,
        }
    }

    /// `a ÷ b`; None when `b` is zero.
    fn ratio(a: Duration, b: Duration) -> Option<Self> {
        (!b.is_zero()).then(|| Figure {
            value: a.as_secs_f64() / b.as_secs_f64(),
            unit: Unit::Times,
        })
    }
}

/// `value` in `unit`.
fn shown(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Ms => format!("{value:.1} ms"),
        Unit::Times => format!("{value:.2}×"),
        Unit::Count => format!("{value:.0}"),
        Unit::Mean => format!("{value:.1}"),
        Unit::Mb => format!("{value:.1} MB"),
        Unit::Secs => format!("{value:.1} s"),
    }
}

/// The median of `values` (the lower middle one of an even count) and their spread in per
/// cent of it (None with one value, or a median of zero).
pub(super) fn median_spread(values: &[f64]) -> (f64, Option<f64>) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let Some(median) = sorted.get(sorted.len().saturating_sub(1) / 2).copied() else {
        return (0.0, None);
    };
    let spread = match (sorted.first(), sorted.last()) {
        (Some(low), Some(high)) if sorted.len() > 1 && median > 0.0 => {
            Some((high - low) / median * 100.0)
        }
        _ => None,
    };
    (median, spread)
}

/// One figure over the runs: its median, then its spread when there are several.
fn reduced(values: &[f64], unit: Unit) -> String {
    let (median, spread) = median_spread(values);
    match spread {
        None => shown(median, unit),
        Some(spread) if spread > FLAGGED_SPREAD => {
            format!("{} ±{spread:.0}% ⚑", shown(median, unit))
        }
        Some(spread) => format!("{} ±{spread:.0}%", shown(median, unit)),
    }
}

/// What a world's run has for a row: its figures, or what to print instead (`—`, with why).
type Figured = Result<Vec<Figure>, &'static str>;

/// Nothing to show.
const NONE: &str = "—";

/// A cell: each run's figures (the same number and units in every run), each reduced over
/// the runs, joined by ` / `; a run's text instead when it has none.
fn cell(runs: &[Figured]) -> String {
    let runs = match runs
        .iter()
        .cloned()
        .collect::<Result<Vec<Vec<Figure>>, _>>()
    {
        Ok(runs) => runs,
        Err(text) => return text.into(),
    };
    let Some(first) = runs.first() else {
        return NONE.into();
    };
    (0..first.len())
        .map(|k| {
            let values: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.get(k))
                .map(|f| f.value)
                .collect();
            reduced(&values, first[k].unit)
        })
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Mean and max of a per-remediation count.
fn mean_max(values: impl Iterator<Item = u64>) -> Vec<Figure> {
    let values: Vec<u64> = values.collect();
    let max = values.iter().copied().max().unwrap_or(0);
    let mean = values.iter().sum::<u64>() as f64 / values.len().max(1) as f64;
    vec![
        Figure {
            value: mean,
            unit: Unit::Mean,
        },
        Figure::count(max),
    ]
}

/// p50 and p99 of one per-remediation duration.
fn p50_p99(f: &Figures, of: fn(&super::sample::Sample) -> Duration) -> Vec<Figure> {
    let mut values: Vec<Duration> = f.samples.iter().map(of).collect();
    values.sort();
    vec![
        Figure::ms(percentile(&values, 50)),
        Figure::ms(percentile(&values, 99)),
    ]
}

/// The table's header cell of a column.
fn header(runs: &[Figures]) -> String {
    let Some(f) = runs.first() else {
        return String::new();
    };
    let repeated = if runs.len() > 1 {
        format!(", median of {} runs", runs.len())
    } else {
        String::new()
    };
    format!(
        "{}, {} remediations, {}{repeated}",
        f.layout.label(),
        f.samples.len(),
        f.server.label()
    )
}

/// Prints one Markdown table, a column per world (each world's runs in order).
pub(super) fn print(columns: &[Vec<Figures>]) {
    let header: Vec<String> = columns.iter().map(|runs| header(runs)).collect();
    println!("| measure | {} | goal |", header.join(" | "));
    println!("|---|{}---|", "---|".repeat(columns.len()));
    let row = |measure: &str, goal: &str, of: &dyn Fn(&Figures) -> Figured| {
        let cells: Vec<String> = columns
            .iter()
            .map(|runs| cell(&runs.iter().map(of).collect::<Vec<_>>()))
            .collect();
        println!("| {measure} | {} | {goal} |", cells.join(" | "));
    };
    latency_rows(columns, &row);
    row(
        "overhead over the physical floor p50 / p99",
        "p99 ≤ 1 s",
        &|f| Ok(p50_p99(f, |s| s.overhead)),
    );
    row(
        "Redfish requests per remediation (mean / max)",
        "≤ 12",
        &|f| Ok(mean_max(f.samples.iter().map(|s| s.bmc_requests))),
    );
    let real = columns
        .iter()
        .any(|runs| runs.iter().any(|f| f.server == ServerKind::Real));
    resource_rows(&row, real);
    if let Some(samples) = columns
        .first()
        .and_then(|runs| runs.first())
        .map(|f| f.samples.len())
    {
        println!();
        println!("{}", p99_caveat(samples));
    }
}

/// Which sample a p99 of `samples` is, by nearest rank, counted from the slowest (1: the
/// slowest); 0 without samples.
fn p99_from_the_slowest(samples: usize) -> usize {
    if samples == 0 {
        return 0;
    }
    let rank = (samples * 99).div_ceil(100).max(1);
    samples + 1 - rank
}

/// The line under the table saying what a p99 is here: below 100 samples a run's p99 is its
/// slowest remediation, one moment of the machine, and its spread over the runs says so.
fn p99_caveat(samples: usize) -> String {
    let which = match p99_from_the_slowest(samples) {
        1 => "the slowest".to_owned(),
        2 => "the second slowest".to_owned(),
        3 => "the third slowest".to_owned(),
        k => format!("the {k}th slowest"),
    };
    format!("Each p99 is {which} of a run's {samples} remediations (nearest rank).")
}

/// A row's printer: the measure, the goal, and each run's figures.
type Row<'a> = dyn Fn(&str, &str, &dyn Fn(&Figures) -> Figured) + 'a;

/// Fence latency, the floors, the ratio to the safe floor, and the ratios between columns.
fn latency_rows(columns: &[Vec<Figures>], row: &Row<'_>) {
    row(
        "fence latency p50 / p99",
        "p99 ≤ 1.5 × the safe floor's",
        &|f| Ok(p50_p99(f, |s| s.fence_latency)),
    );
    for floor in [Floor::Bare, Floor::Safe] {
        row(
            &format!("the {}'s fence latency p50 / p99", floor.label()),
            "",
            &|f| {
                let values = f.floor(floor);
                Ok(vec![
                    Figure::ms(percentile(values, 50)),
                    Figure::ms(percentile(values, 99)),
                ])
            },
        );
    }
    row(
        "the safe floor's samples triggered apart (--floor-pace)",
        "",
        &|f| Ok(vec![Figure::secs(f.safe_floor_spacing)]),
    );
    row(
        "fence latency × the safe floor, p50 / p99",
        "p99 ≤ 1.5",
        &|f| {
            let ours = f.fence_latencies();
            let safe = f.floor(Floor::Safe);
            Ok(vec![
                Figure::ratio(percentile(&ours, 50), percentile(safe, 50)).ok_or(NONE)?,
                Figure::ratio(percentile(&ours, 99), percentile(safe, 99)).ok_or(NONE)?,
            ])
        },
    );
    let [first, second] = columns else {
        return;
    };
    let p99 = |f: &Figures| percentile(&f.fence_latencies(), 99);
    // Run by run: the two columns' runs alternate in time, so run i of each shares a moment.
    let ratios: Vec<Figured> = first
        .iter()
        .zip(second)
        .map(|(a, b)| Figure::ratio(p99(b), p99(a)).map(|r| vec![r]).ok_or(NONE))
        .collect();
    let Some(b) = second.first() else {
        return;
    };
    if b.layout.is_fleet() {
        println!(
            "| fence latency p99, the fleet ÷ one cluster | — | {} | ≤ 1.2 |",
            cell(&ratios)
        );
    } else if b.server == ServerKind::Real {
        println!(
            "| fence latency p99, the real server ÷ the simulated | — | {} | reported |",
            cell(&ratios)
        );
    }
}

/// Memory, API requests and the bring-up (with the plane's start when a world is `real`).
fn resource_rows(row: &Row<'_>, real: bool) {
    row(
        "controller resident memory, the largest (now / peak / heap and stacks)",
        "≤ 100 MB per controller",
        &|f| {
            let largest = f
                .memory
                .iter()
                .max_by_key(|m| m.peak)
                .copied()
                .ok_or(NONE)?;
            Ok(vec![
                Figure::mb(largest.rss),
                Figure::mb(largest.peak),
                Figure::mb(largest.anonymous),
            ])
        },
    );
    row("resident memory of each controller (now)", "", &|f| {
        Ok(f.memory.iter().map(|m| Figure::mb(m.rss)).collect())
    });
    row(
        "management-cluster API requests per remediation (mean / max)",
        "reported",
        &|f| Ok(mean_max(f.samples.iter().map(|s| s.api.management))),
    );
    row(
        "workload-cluster API requests per remediation (mean / max)",
        "reported",
        &|f| {
            f.layout
                .is_fleet()
                .then(|| mean_max(f.samples.iter().map(|s| s.api.workload)))
                .ok_or("— (Nodes in the one API server)")
        },
    );
    row(
        "API requests at start, all controllers (management / workload / their watches)",
        "",
        &|f| {
            let s = f.start_requests;
            Ok(vec![
                Figure::count(s.management),
                Figure::count(s.workload),
                Figure::count(s.management_watches + s.workload_watches),
            ])
        },
    );
    row(
        "bring-up: cluster Ready / hosts detached / controllers ready / idle after",
        "",
        &|f| {
            Ok(vec![
                Figure::secs(f.cluster_up),
                Figure::secs(f.prepared),
                Figure::secs(f.controllers_ready),
                Figure::secs(f.controllers_settled),
            ])
        },
    );
    if real {
        row("the real control plane's start", "", &|f| {
            f.plane_started.map(|d| vec![Figure::secs(d)]).ok_or(NONE)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_is_the_median_of_its_runs_with_their_spread_flagged_past_a_fifth() {
        assert_eq!(median_spread(&[12.0]), (12.0, None), "one run: no spread");
        let (median, spread) = median_spread(&[14.0, 12.0, 13.0]);
        assert_eq!(median, 13.0);
        assert!((spread.unwrap() - 2.0 / 13.0 * 100.0).abs() < 1e-9);
        assert_eq!(median_spread(&[1.0, 4.0]).0, 1.0, "the lower middle of two");
        assert_eq!(
            median_spread(&[0.0, 0.0, 1.0]),
            (0.0, None),
            "no spread of a zero"
        );
        assert_eq!(reduced(&[14.0, 12.0, 13.0], Unit::Ms), "13.0 ms ±15%");
        assert_eq!(
            reduced(&[74.0, 10006.0, 90.0], Unit::Ms),
            "90.0 ms ±11036% ⚑"
        );
        assert_eq!(reduced(&[2.5], Unit::Times), "2.50×");
    }

    #[test]
    fn a_p99_names_which_sample_it_is() {
        assert_eq!(p99_from_the_slowest(0), 0);
        for (samples, from_the_slowest) in [
            (1, 1),
            (30, 1),
            (99, 1),
            (100, 2),
            (199, 2),
            (200, 3),
            (201, 3),
        ] {
            assert_eq!(
                p99_from_the_slowest(samples),
                from_the_slowest,
                "{samples} samples"
            );
            let mut sorted: Vec<Duration> =
                (1..=samples as u64).map(Duration::from_millis).collect();
            sorted.sort();
            assert_eq!(
                percentile(&sorted, 99),
                sorted[samples - from_the_slowest],
                "the caveat names the sample percentile() takes, {samples} samples"
            );
        }
        assert_eq!(
            p99_caveat(30),
            "Each p99 is the slowest of a run's 30 remediations (nearest rank)."
        );
        assert!(p99_caveat(200).contains("the third slowest"));
        assert!(p99_caveat(1000).contains("the 11th slowest"));
    }

    #[test]
    fn a_cell_reduces_each_figure_and_says_when_a_run_has_none() {
        let run = |a: f64, b: f64| {
            Ok(vec![
                Figure {
                    value: a,
                    unit: Unit::Mean,
                },
                Figure {
                    value: b,
                    unit: Unit::Count,
                },
            ])
        };
        assert_eq!(
            cell(&[run(41.5, 43.0), run(41.5, 44.0), run(41.5, 43.0)]),
            "41.5 ±0% / 43 ±2%"
        );
        assert_eq!(cell(&[run(1.0, 2.0), Err("— (why)")]), "— (why)");
    }
}
