//! openraft's own storage test suite (`openraft::testing::log::Suite`) run
//! on fila-cluster's log store and state machine: on a simulated disk and
//! on the file system.

use fila_cluster::{LogStore, NodeLog, StateMachine, TypeConfig};
use fila_wal::{FsStorage, LogOptions, SimDisk};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

/// Small segments, so the suite's logs span several.
fn options() -> LogOptions {
    LogOptions { segment_bytes: 512 }
}

fn failed(e: impl std::fmt::Display) -> StorageError<TypeConfig> {
    use openraft::errors::ErrorSource;
    StorageError::read(openraft::impls::BoxedErrorSource::from_string(e))
}

struct OnSimDisk;

impl StoreBuilder<TypeConfig, LogStore<SimDisk>, StateMachine<SimDisk>> for OnSimDisk {
    async fn build(
        &self,
    ) -> Result<((), LogStore<SimDisk>, StateMachine<SimDisk>), StorageError<TypeConfig>> {
        let log = NodeLog::open(SimDisk::new(7), options())
            .and_then(|l| l.group(5))
            .map_err(failed)?;
        let sm = StateMachine::open(SimDisk::new(8)).map_err(failed)?;
        Ok(((), log, sm))
    }
}

/// A directory removed when the test that made it is done with it.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct OnFiles(std::sync::atomic::AtomicU64);

impl StoreBuilder<TypeConfig, LogStore<FsStorage>, StateMachine<FsStorage>, TempDir> for OnFiles {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore<FsStorage>, StateMachine<FsStorage>), StorageError<TypeConfig>>
    {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("fila-cluster-suite-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let guard = TempDir(dir.clone());
        let log = NodeLog::open(FsStorage::new(dir.join("log")).map_err(failed)?, options())
            .and_then(|l| l.group(5))
            .map_err(failed)?;
        let sm = StateMachine::open(FsStorage::new(dir.join("state")).map_err(failed)?)
            .map_err(failed)?;
        Ok((guard, log, sm))
    }
}

#[tokio::test]
async fn openraft_storage_suite_on_a_simulated_disk() {
    Suite::test_all(OnSimDisk).await.unwrap();
}

#[tokio::test]
async fn openraft_storage_suite_on_the_file_system() {
    Suite::test_all(OnFiles(Default::default())).await.unwrap();
}
