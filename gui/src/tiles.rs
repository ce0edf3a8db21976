//! Raw samples in time tiles: what the loader reads a tile at a time (to build the pyramid, then
//! on demand for the view's zoomed-in columns and the selection's edges), held up to a memory
//! budget, least recently used first out.

use crate::lod::{RawSeries, RawSlice};
use cufall_trace::SampleColumns;
use cufall_trace::model::DeviceId;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// Samples (all devices) per tile the worker reads at a time.
pub const TILE_SAMPLES: u64 = 1 << 20;
/// Default memory for raw samples kept in tiles.
pub const DEFAULT_RAW_BUDGET_BYTES: usize = 256 << 20;
/// The share of the raw-sample budget (1/`BUILD_KEEPS`) that tiles read for the pyramid may
/// keep; the rest is for the tiles the view asks for.
pub const BUILD_KEEPS: usize = 4;

/// A tile of raw samples: every device's samples starting in its time span.
#[derive(Debug, Default)]
pub struct Tile {
    pub devices: BTreeMap<DeviceId, RawSeries>,
    bytes: usize,
}

impl Tile {
    /// Counts the bytes held again, after the series grew.
    pub(crate) fn recount(&mut self) {
        self.bytes = self.devices.values().map(RawSeries::bytes).sum();
    }
}

/// Tiles held in memory, least recently used first out.
#[derive(Debug)]
pub struct TileCache {
    /// Start of tile 0 and the span of each tile.
    pub origin_ns: i64,
    pub tile_ns: i64,
    /// Number of tiles covering the samples.
    pub count: i64,
    tiles: HashMap<i64, Tile>,
    lru: VecDeque<i64>,
    pub(crate) pending: HashSet<i64>,
    /// Tiles that could not be read: not asked for again.
    pub(crate) failed: HashSet<i64>,
    budget: usize,
    bytes: usize,
}

impl TileCache {
    pub(crate) fn new(budget: usize) -> TileCache {
        TileCache {
            origin_ns: 0,
            tile_ns: 1,
            count: 0,
            tiles: HashMap::new(),
            lru: VecDeque::new(),
            pending: HashSet::new(),
            failed: HashSet::new(),
            budget,
            bytes: 0,
        }
    }

    /// Tiles whose samples may overlap `[t0, t1)` (a sample may start in the tile before).
    pub fn tiles_for(&self, t0: i64, t1: i64) -> std::ops::RangeInclusive<i64> {
        if self.count == 0 {
            #[allow(clippy::reversed_empty_ranges)]
            return 1..=0;
        }
        let k = |t: i64| ((t - self.origin_ns).div_euclid(self.tile_ns)).clamp(0, self.count - 1);
        (k(t0) - 1).max(0)..=k(t1.max(t0))
    }

    pub fn get(&self, k: i64) -> Option<&Tile> {
        self.tiles.get(&k)
    }

    /// The raw series of `device` for `[t0, t1)`, one per tile; `None` if a tile is missing.
    pub fn series(&self, device: DeviceId, t0: i64, t1: i64) -> Option<Vec<&RawSeries>> {
        let mut out = Vec::new();
        for k in self.tiles_for(t0, t1) {
            let tile = self.tiles.get(&k)?;
            if let Some(s) = tile.devices.get(&device) {
                out.push(s);
            }
        }
        Some(out)
    }

    /// Samples of metric `m` of `device` overlapping `[t0, t1)`, if their tiles are held.
    pub fn slice(&self, device: DeviceId, m: usize, t0: i64, t1: i64) -> Option<RawSlice> {
        let mut out = RawSlice::default();
        for s in self.series(device, t0, t1)? {
            let part = RawSlice::from_series(s, m, t0, t1);
            out.start_ns.extend(part.start_ns);
            out.end_ns.extend(part.end_ns);
            out.values.extend(part.values);
        }
        Some(out)
    }

    /// Missing tiles of `[t0, t1)` not yet asked for.
    pub(crate) fn missing(&self, t0: i64, t1: i64) -> Vec<i64> {
        self.tiles_for(t0, t1)
            .filter(|k| {
                !self.tiles.contains_key(k) && !self.pending.contains(k) && !self.failed.contains(k)
            })
            .collect()
    }

    fn touch(&mut self, k: i64) {
        if let Some(i) = self.lru.iter().position(|x| *x == k) {
            self.lru.remove(i);
        }
        self.lru.push_back(k);
    }

    /// Keeps `tile` if `force` (the view asked for it) or it fits the share of the budget
    /// that the pyramid's build may keep; evicts least recently used tiles.
    pub(crate) fn insert(&mut self, k: i64, tile: Tile, force: bool) -> bool {
        self.pending.remove(&k);
        if !force && self.bytes + tile.bytes > self.budget / BUILD_KEEPS {
            return false;
        }
        self.bytes += tile.bytes;
        self.tiles.insert(k, tile);
        self.touch(k);
        while self.bytes > self.budget && self.lru.len() > 1 {
            if let Some(old) = self.lru.pop_front()
                && let Some(t) = self.tiles.remove(&old)
            {
                self.bytes -= t.bytes;
            }
        }
        true
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Adds the samples of one segment to `tile`, split by device. The trace stores each device's
/// samples in time order (segments in order, batches in order), so no sort is needed in the
/// common case; the caller sorts a device whose samples are not in start order.
pub(crate) fn add_to_tile(tile: &mut Tile, rows: SampleColumns) {
    let metrics = rows.values.len();
    for i in 0..rows.len() {
        let (s, e) = (rows.start_ns[i], rows.end_ns[i]);
        let series = tile
            .devices
            .entry(DeviceId(u32::from(rows.device[i])))
            .or_insert_with(|| RawSeries::new(metrics));
        series.start_ns.push(s);
        series.end_ns.push(e.max(s));
        for (m, column) in rows.values.iter().enumerate() {
            series.values[m].push(column[i]);
        }
    }
}

/// Puts every device of `tile` in start order and counts its bytes.
pub(crate) fn finish_tile(tile: &mut Tile) {
    for series in tile.devices.values_mut() {
        sort_by_start(series);
    }
    tile.recount();
}

/// Puts `series` in start order (stable), if it is not already.
fn sort_by_start(series: &mut RawSeries) {
    if series.start_ns.is_sorted() {
        return;
    }
    let mut idx: Vec<usize> = (0..series.len()).collect();
    idx.sort_by_key(|i| series.start_ns[*i]);
    let take_i64 = |v: &[i64]| idx.iter().map(|i| v[*i]).collect::<Vec<_>>();
    series.start_ns = take_i64(&series.start_ns);
    series.end_ns = take_i64(&series.end_ns);
    for col in series.values.iter_mut() {
        *col = idx.iter().map(|i| col[*i]).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tile_splits_interleaved_devices_and_sorts_a_device_out_of_order() {
        let rows = SampleColumns {
            device: vec![0, 1, 0, 1, 0],
            start_ns: vec![10, 10, 20, 30, 15],
            end_ns: vec![20, 20, 30, 40, 20],
            values: vec![vec![1.0, 2.0, 3.0, 4.0, 5.0]],
        };
        let mut tile = Tile::default();
        add_to_tile(&mut tile, rows);
        finish_tile(&mut tile);
        let d0 = &tile.devices[&DeviceId(0)];
        assert_eq!(d0.start_ns, vec![10, 15, 20]);
        assert_eq!(d0.end_ns, vec![20, 20, 30]);
        assert_eq!(d0.values[0], vec![1.0, 5.0, 3.0]);
        let d1 = &tile.devices[&DeviceId(1)];
        assert_eq!(d1.start_ns, vec![10, 30]);
        assert_eq!(d1.values[0], vec![2.0, 4.0]);
        assert_eq!(tile.bytes, d0.bytes() + d1.bytes());
    }

    #[test]
    fn tiles_cover_the_previous_one_and_stay_in_range() {
        let mut c = TileCache::new(1 << 20);
        c.origin_ns = 1000;
        c.tile_ns = 100;
        c.count = 5;
        assert_eq!(c.tiles_for(1250, 1420), 1..=4);
        assert_eq!(c.tiles_for(0, 50), 0..=0);
        assert_eq!(c.tiles_for(5000, 6000), 3..=4);
        assert!(
            c.series(DeviceId(0), 1250, 1420).is_none(),
            "nothing held yet"
        );
    }
}
