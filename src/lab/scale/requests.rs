//! The API requests the benchmark's controllers make, as the simulated API servers record
//! them.

use std::time::{Duration, Instant};

use baremend_sim::apiserver::ApiServer;

use crate::lab::setup::LabCluster;

/// HTTP requests answered by the simulated API servers (the controllers' only: the
/// simulator's own actors use the store directly, and the lab's own HTTP client is idle while
/// they are counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ApiCounts {
    /// On the management cluster's API server (the one cluster's without workload clusters).
    pub management: u64,
    /// Of which watches.
    pub management_watches: u64,
    /// On the workload clusters' API servers, summed.
    pub workload: u64,
    /// Of which watches.
    pub workload_watches: u64,
}

fn counts_of(server: &ApiServer) -> (u64, u64) {
    let records = server.recorded_requests();
    let watches = records.iter().filter(|r| r.watch).count();
    (records.len() as u64, watches as u64)
}

impl ApiCounts {
    /// The requests the simulated API servers of `lab` recorded so far.
    pub(super) fn of_lab(lab: &LabCluster) -> Self {
        let (management, management_watches) = counts_of(lab.cluster.api_server());
        let (workload, workload_watches) = lab
            .cluster
            .workload_clusters()
            .iter()
            .map(|c| counts_of(c.api_server()))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        ApiCounts {
            management,
            management_watches,
            workload,
            workload_watches,
        }
    }

    /// The requests since `before`.
    pub(super) fn since(self, before: Self) -> Self {
        ApiCounts {
            management: self.management - before.management,
            management_watches: self.management_watches - before.management_watches,
            workload: self.workload - before.workload,
            workload_watches: self.workload_watches - before.workload_watches,
        }
    }
}

/// One request of a remediation, as its API server recorded it.
pub(super) struct Traced {
    /// After the trigger was stored.
    pub after: Duration,
    /// How long the server took to answer it (its head), when known.
    pub took: Option<Duration>,
    /// `management`, or the workload cluster's name.
    pub server: String,
    pub method: String,
    pub path: String,
}

/// Every request recorded from `from` on, first to last, on every simulated API server of
/// the lab.
pub(super) fn timeline(lab: &LabCluster, from: Instant) -> Vec<Traced> {
    let servers = std::iter::once(("management", lab.cluster.api_server())).chain(
        lab.cluster
            .workload_clusters()
            .iter()
            .map(|c| (c.name(), c.api_server())),
    );
    let mut traced: Vec<Traced> = servers
        .flat_map(|(server, api)| {
            api.recorded_requests()
                .into_iter()
                .filter(|r| r.at >= from)
                .map(move |r| Traced {
                    after: r.at - from,
                    took: r.served.map(|served| served - r.at),
                    server: server.to_string(),
                    method: r.method,
                    path: r.path,
                })
        })
        .collect();
    traced.sort_by_key(|t| t.after);
    traced
}
