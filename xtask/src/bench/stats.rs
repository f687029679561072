//! Statistics of repeated samples and fio's JSON output.

use anyhow::{bail, Context, Result};

/// Median, smallest and largest of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Number of samples.
    pub n: usize,
    /// The median (the mean of the two middle samples for an even count).
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

/// The spread of `values`; `None` if there are none (NaNs are ignored).
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        n,
        median,
        min: v[0],
        max: v[n - 1],
    })
}

/// `a / b`, or `None` when either is missing or `b` is not positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

/// The numbers the harness takes from one fio run (all jobs added up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FioSummary {
    /// Operations per second, reads and writes.
    pub iops: f64,
    /// Bytes per second, reads and writes.
    pub bw_bytes: f64,
    /// Mean completion latency over all operations, in nanoseconds.
    pub lat_mean_ns: Option<f64>,
    /// Longest job runtime in milliseconds.
    pub runtime_ms: u64,
    /// Jobs in the output (1 with group_reporting).
    pub jobs: usize,
    /// Every operation the process did, its ramp included, where the
    /// output says (`fuse-bench-meta`'s `bench.ramp_ops` added to
    /// `total_ios`); `None` for fio, which doesn't count its ramp.
    pub ops_done: Option<f64>,
}

/// Parses fio's `--output-format=json` output (or `fuse-bench-meta`'s,
/// which has the same shape). Text before the first `{` (fio sometimes
/// prints notes there) is skipped. A job with a non-zero `error` fails.
pub fn parse_fio(text: &str) -> Result<FioSummary> {
    let start = text.find('{').context("no JSON object in fio's output")?;
    let v: serde_json::Value =
        serde_json::from_str(&text[start..]).context("fio's output is not valid JSON")?;
    let jobs = v["jobs"]
        .as_array()
        .context("fio's output has no \"jobs\" array")?;
    if jobs.is_empty() {
        bail!("fio's output has no jobs");
    }
    let mut s = FioSummary {
        iops: 0.0,
        bw_bytes: 0.0,
        lat_mean_ns: None,
        runtime_ms: 0,
        jobs: jobs.len(),
        ops_done: Some(0.0),
    };
    let (mut lat_sum, mut lat_ios) = (0.0, 0.0);
    for job in jobs {
        let name = job["jobname"].as_str().unwrap_or("?");
        let error = job["error"].as_i64().unwrap_or(0);
        if error != 0 {
            bail!("fio job {name} failed with error {error}");
        }
        for dir in ["read", "write", "trim"] {
            let d = &job[dir];
            if d.is_null() {
                continue;
            }
            let iops = d["iops"].as_f64().unwrap_or(0.0);
            s.iops += iops;
            s.bw_bytes += d["bw_bytes"].as_f64().unwrap_or(0.0);
            let ios = d["total_ios"].as_f64().unwrap_or(0.0);
            let mean = d["lat_ns"]["mean"]
                .as_f64()
                .or_else(|| d["clat_ns"]["mean"].as_f64());
            if let Some(mean) = mean {
                if ios > 0.0 {
                    lat_sum += mean * ios;
                    lat_ios += ios;
                }
            }
        }
        let runtime = job["job_runtime"]
            .as_u64()
            .or_else(|| job["read"]["runtime"].as_u64())
            .unwrap_or(0);
        s.runtime_ms = s.runtime_ms.max(runtime);
        let bench = &job["bench"];
        let ramp_ops = bench["ramp_ops"].as_f64().or_else(|| {
            // An older fuse-bench-meta: only a run without a ramp is known.
            (bench["ramp_ms"].as_u64() == Some(0)).then_some(0.0)
        });
        let job_ios: f64 = ["read", "write", "trim"]
            .iter()
            .filter_map(|d| job[*d]["total_ios"].as_f64())
            .sum();
        s.ops_done = match (s.ops_done, ramp_ops) {
            (Some(sum), Some(ramp)) if bench.is_object() => Some(sum + job_ios + ramp),
            _ => None,
        };
    }
    if lat_ios > 0.0 {
        s.lat_mean_ns = Some(lat_sum / lat_ios);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads() {
        assert_eq!(spread(&[]), None);
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        let s = spread(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        let s = spread(&[f64::NAN, 5.0]).unwrap();
        assert_eq!((s.n, s.median), (1, 5.0));
        assert_eq!(spread(&[7.0]).unwrap().median, 7.0);
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
    }

    /// Trimmed from a real `fio --output-format=json` run (fio 3.33).
    const FIO: &str = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "randread-4k-cached",
      "groupid" : 0,
      "error" : 0,
      "job_runtime" : 4000,
      "read" : {
        "io_bytes" : 8200192000,
        "bw_bytes" : 2050048000,
        "iops" : 500500.5,
        "runtime" : 4000,
        "total_ios" : 2002002,
        "lat_ns" : { "min" : 1000, "max" : 90000, "mean" : 1800.0 }
      },
      "write" : {
        "io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0, "runtime" : 0, "total_ios" : 0,
        "lat_ns" : { "min" : 0, "max" : 0, "mean" : 0.0 }
      },
      "trim" : {
        "io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0, "runtime" : 0, "total_ios" : 0,
        "lat_ns" : { "min" : 0, "max" : 0, "mean" : 0.0 }
      }
    }
  ]
}"#;

    #[test]
    fn parses_fio_json() {
        let s = parse_fio(FIO).unwrap();
        assert_eq!(s.jobs, 1);
        assert!((s.iops - 500500.5).abs() < 1e-9);
        assert_eq!(s.bw_bytes, 2050048000.0);
        assert_eq!(s.lat_mean_ns, Some(1800.0));
        assert_eq!(s.runtime_ms, 4000);
        assert_eq!(s.ops_done, None, "fio doesn't count its ramp");
    }

    #[test]
    fn meta_output_counts_the_ramp() {
        let meta = |bench: &str| {
            format!(
                r#"{{"jobs":[{{"jobname":"stat","error":0,"job_runtime":1000,
                "read":{{"iops":5000.0,"bw_bytes":0,"total_ios":5000,"lat_ns":{{"mean":1.0}}}},
                "write":{{"iops":0.0,"bw_bytes":0,"total_ios":0}},
                "bench":{bench}}}]}}"#
            )
        };
        let s = parse_fio(&meta(r#"{"ramp_ms":1000,"ramp_ops":4000}"#)).unwrap();
        assert_eq!(s.ops_done, Some(9000.0));
        let s = parse_fio(&meta(r#"{"ramp_ms":0}"#)).unwrap();
        assert_eq!(s.ops_done, Some(5000.0));
        let s = parse_fio(&meta(r#"{"ramp_ms":1000}"#)).unwrap();
        assert_eq!(s.ops_done, None, "a ramp of unknown length");
    }

    #[test]
    fn adds_up_jobs_and_directions() {
        let two = r#"{"jobs":[
            {"jobname":"a","error":0,"job_runtime":10,
             "read":{"iops":100.0,"bw_bytes":1000,"total_ios":100,"lat_ns":{"mean":10.0}},
             "write":{"iops":50.0,"bw_bytes":500,"total_ios":300,"lat_ns":{"mean":30.0}}},
            {"jobname":"b","error":0,"job_runtime":12,
             "read":{"iops":1.0,"bw_bytes":1,"total_ios":0,"lat_ns":{"mean":999.0}}}]}"#;
        let s = parse_fio(two).unwrap();
        assert_eq!(s.jobs, 2);
        assert_eq!(s.iops, 151.0);
        assert_eq!(s.bw_bytes, 1501.0);
        assert_eq!(s.lat_mean_ns, Some(25.0));
        assert_eq!(s.runtime_ms, 12);
    }

    #[test]
    fn refuses_bad_output() {
        assert!(parse_fio("").is_err());
        assert!(parse_fio("fio: engine not found").is_err());
        assert!(parse_fio("{\"jobs\": []}").is_err());
        assert!(parse_fio("{\"nojobs\": 1}").is_err());
        assert!(parse_fio("{\"jobs\":[{\"jobname\":\"x\",\"error\":5}]}").is_err());
        assert!(parse_fio("{ not json").is_err());
    }
}
