//! Blank counter-data images, made and restored cheaply.
//!
//! A PM-sampling counter-data image is big (about 25 KB per sample on GH100) and cufall sizes
//! images with a large margin so that `COUNTER_DATA_FULL` never drops samples (see
//! `sampler/src/sizing.rs`). Most of an image is never written: it is sealed long before it fills.
//! Two facts keep that margin nearly free:
//!
//! - **Layout.** The image size grows by a fixed number of bytes per sample
//!   (`cuptiPmSamplingGetCounterDataSize`), and decode writes a header and then one slot per
//!   sample, in order. So after `n` samples only the first [`ImageLayout::prefix_bytes`]`(n)`
//!   bytes can differ from a blank image, and only those need restoring. cufall checks this on
//!   the running GPU ([`BlankImage::first_difference_after`]) and blanks whole images if it
//!   ever fails.
//! - **Repetition.** Every sample slot of a blank image holds the same bytes (GH100, CUPTI 13.0:
//!   the slots are not zero), so the blank image is kept as its header and one slot, a few tens
//!   of KB instead of hundreds of MB, and restoring copies from that small, cache-resident
//!   pattern. (Where slots differ, the blank image is kept up to its last non-zero byte.)

use crate::image::CounterData;

/// Where samples live in an image: a header, then `bytes_per_sample` per sample slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    pub header_bytes: usize,
    pub bytes_per_sample: usize,
}

impl ImageLayout {
    /// The layout that image sizes for 1, 2 and 101 samples imply, or `None` when the size does
    /// not grow linearly (then nothing is assumed about where samples live).
    pub fn from_sizes(one: usize, two: usize, hundred_one: usize) -> Option<ImageLayout> {
        let per = two.checked_sub(one)?;
        if per == 0 || hundred_one.checked_sub(one)? != per * 100 {
            return None;
        }
        Some(ImageLayout {
            header_bytes: one.checked_sub(per)?,
            bytes_per_sample: per,
        })
    }

    /// Bytes at the start of an image that decoding `samples` samples can have written: the
    /// header, those samples' slots and the slot of one more sample in progress.
    pub fn prefix_bytes(&self, samples: usize) -> usize {
        self.header_bytes.saturating_add(
            samples
                .saturating_add(1)
                .saturating_mul(self.bytes_per_sample),
        )
    }

    /// Size of an image with room for `samples` samples.
    pub fn image_bytes(&self, samples: usize) -> usize {
        self.header_bytes
            .saturating_add(samples.saturating_mul(self.bytes_per_sample))
    }
}

/// How the blank image's bytes are kept.
#[derive(Clone, Debug)]
enum Pattern {
    /// The header and one blank sample slot: every slot of a blank image is the same bytes
    /// (what CUPTI 13.0 writes on GH100), so the image is the header and the slot repeated.
    Periodic { header: Vec<u8>, slot: Vec<u8> },
    /// The bytes up to the last non-zero one; the rest is zeros.
    Head(Vec<u8>),
}

const ZEROS: [u8; 4096] = [0; 4096];

/// A blank image of one configuration, kept compactly (see [`Pattern`]).
#[derive(Clone, Debug)]
pub struct BlankImage {
    pattern: Pattern,
    size: usize,
    capacity: u32,
    layout: Option<ImageLayout>,
}

impl BlankImage {
    /// Keeps what is needed to recreate `blank` (an image just initialised by CUPTI) and to
    /// restore used images of the same configuration.
    pub fn new(blank: CounterData, layout: Option<ImageLayout>) -> BlankImage {
        Self::from_blank(&blank, layout)
    }

    /// [`BlankImage::new`] without taking the image, which stays usable as a first blank image
    /// (so the full-size image CUPTI initialised is not thrown away).
    pub fn from_blank(blank: &CounterData, layout: Option<ImageLayout>) -> BlankImage {
        let capacity = blank.capacity();
        let bytes = blank.bytes();
        let size = bytes.len();
        // A layout that does not match this image's size is not trusted.
        let layout = layout.filter(|l| l.image_bytes(capacity as usize) == size);
        let periodic = layout.filter(|l| {
            let slots = &bytes[l.header_bytes..];
            let first = &slots[..l.bytes_per_sample.min(slots.len())];
            slots
                .chunks_exact(l.bytes_per_sample)
                .all(|slot| slot == first)
        });
        let pattern = match periodic {
            Some(l) if capacity > 0 => Pattern::Periodic {
                header: bytes[..l.header_bytes].to_vec(),
                slot: bytes[l.header_bytes..l.header_bytes + l.bytes_per_sample].to_vec(),
            },
            _ => {
                let nonzero = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
                Pattern::Head(bytes[..nonzero].to_vec())
            }
        };
        BlankImage {
            pattern,
            size,
            capacity,
            layout,
        }
    }

    pub fn size_bytes(&self) -> usize {
        self.size
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Bytes this value keeps to describe the blank image.
    pub fn kept_bytes(&self) -> usize {
        match &self.pattern {
            Pattern::Periodic { header, slot } => header.len() + slot.len(),
            Pattern::Head(h) => h.len(),
        }
    }

    /// Whether every sample slot of the blank image is the same bytes.
    pub fn is_periodic(&self) -> bool {
        matches!(self.pattern, Pattern::Periodic { .. })
    }

    pub fn layout(&self) -> Option<ImageLayout> {
        self.layout
    }

    /// Calls `f(offset, blank_bytes)` for consecutive pieces of the blank image covering
    /// `[from, to)`, until `f` returns false.
    fn pieces(&self, from: usize, to: usize, mut f: impl FnMut(usize, &[u8]) -> bool) {
        let to = to.min(self.size);
        let mut at = from.min(to);
        while at < to {
            let piece: &[u8] = match &self.pattern {
                Pattern::Periodic { header, slot } => {
                    if at < header.len() {
                        &header[at..]
                    } else {
                        &slot[(at - header.len()) % slot.len()..]
                    }
                }
                Pattern::Head(head) if at < head.len() => &head[at..],
                Pattern::Head(_) => &ZEROS[..],
            };
            let piece = &piece[..piece.len().min(to - at)];
            if !f(at, piece) {
                return;
            }
            at += piece.len();
        }
    }

    /// A new blank image.
    pub fn new_image(&self) -> CounterData {
        let mut bytes = vec![0u8; self.size];
        let end = match &self.pattern {
            Pattern::Periodic { .. } => self.size,
            // Zeroed memory is blank beyond the head already (and not resident until written).
            Pattern::Head(h) => h.len(),
        };
        self.pieces(0, end, |at, piece| {
            bytes[at..at + piece.len()].copy_from_slice(piece);
            true
        });
        CounterData::from_bytes(bytes, self.capacity)
    }

    /// Makes `img` blank again. With `touched_samples` (the populated count when decoding into
    /// it ended) and a known layout, only the bytes decode can have written are restored;
    /// otherwise the whole image is. Returns the bytes written.
    pub fn restore(&self, img: &mut CounterData, touched_samples: Option<usize>) -> usize {
        if img.size_bytes() != self.size {
            *img = self.new_image();
            return self.size;
        }
        let end = match (touched_samples, self.layout) {
            (Some(n), Some(l)) => l.prefix_bytes(n).min(self.size),
            _ => self.size,
        };
        let bytes = img.bytes_mut();
        self.pieces(0, end, |at, piece| {
            bytes[at..at + piece.len()].copy_from_slice(piece);
            true
        });
        end
    }

    /// The first offset at or after `from` where `img` differs from the blank image, if any.
    pub fn first_difference_after(&self, img: &CounterData, from: usize) -> Option<usize> {
        let bytes = img.bytes();
        if bytes.len() != self.size {
            return Some(from.min(bytes.len()));
        }
        let mut found = None;
        self.pieces(from, self.size, |at, piece| {
            let have = &bytes[at..at + piece.len()];
            if have != piece {
                found = have
                    .iter()
                    .zip(piece)
                    .position(|(a, b)| a != b)
                    .map(|i| at + i);
                return false;
            }
            true
        });
        found
    }

    /// Byte ranges `[start, end)` where `img` differs from the blank image (at most `max`,
    /// neighbours closer than `join` bytes merged). For probes and tests, not hot paths.
    pub fn differing_ranges(
        &self,
        img: &CounterData,
        join: usize,
        max: usize,
    ) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let bytes = img.bytes();
        self.pieces(0, bytes.len(), |at, piece| {
            for (k, (b, blank)) in bytes[at..at + piece.len()].iter().zip(piece).enumerate() {
                if b == blank {
                    continue;
                }
                let i = at + k;
                match out.last_mut() {
                    Some(last) if i <= last.1 + join => last.1 = i + 1,
                    _ => {
                        if out.len() == max {
                            return false;
                        }
                        out.push((i, i + 1));
                    }
                }
            }
            true
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank(header: usize, per: usize, cap: usize) -> (CounterData, ImageLayout) {
        let l = ImageLayout {
            header_bytes: header,
            bytes_per_sample: per,
        };
        let mut bytes = vec![0u8; l.image_bytes(cap)];
        // A header with some non-zero bytes, and a marker in the first slot.
        for (i, b) in bytes[..header].iter_mut().enumerate() {
            *b = (i % 7) as u8;
        }
        bytes[header + 3] = 9;
        (CounterData::from_bytes(bytes, cap as u32), l)
    }

    /// What decode does, as far as the layout goes: writes the header and `n` slots.
    fn decode_into(img: &mut CounterData, l: ImageLayout, n: usize) {
        let b = img.bytes_mut();
        b[0] = 0xAA;
        for s in 0..n {
            let at = l.header_bytes + s * l.bytes_per_sample;
            b[at..at + l.bytes_per_sample].fill(0x55);
        }
    }

    #[test]
    fn layout_from_sizes() {
        let l = ImageLayout::from_sizes(1100, 1200, 11_100).unwrap();
        assert_eq!(l.header_bytes, 1000);
        assert_eq!(l.bytes_per_sample, 100);
        assert_eq!(l.prefix_bytes(0), 1100);
        assert_eq!(l.prefix_bytes(3), 1400);
        assert_eq!(ImageLayout::from_sizes(1100, 1200, 11_000), None);
        assert_eq!(ImageLayout::from_sizes(1100, 1100, 1100), None);
        assert_eq!(ImageLayout::from_sizes(1200, 1100, 11_100), None);
    }

    #[test]
    fn head_is_trimmed_and_new_images_are_blank() {
        let (img, l) = blank(64, 32, 100);
        let size = img.size_bytes();
        let b = BlankImage::new(img.clone(), Some(l));
        assert!(!b.is_periodic());
        assert_eq!(b.kept_bytes(), 64 + 4);
        assert_eq!(b.size_bytes(), size);
        assert_eq!(b.layout(), Some(l));
        assert_eq!(b.new_image().bytes(), img.bytes());
    }

    #[test]
    fn a_layout_that_does_not_fit_the_image_is_dropped() {
        let (img, l) = blank(64, 32, 100);
        let wrong = ImageLayout {
            bytes_per_sample: 31,
            ..l
        };
        assert_eq!(BlankImage::new(img, Some(wrong)).layout(), None);
    }

    #[test]
    fn restoring_the_prefix_blanks_a_used_image() {
        let (img, l) = blank(64, 32, 100);
        let b = BlankImage::new(img.clone(), Some(l));
        for n in [0usize, 1, 5, 99] {
            let mut used = b.new_image();
            decode_into(&mut used, l, n);
            assert_eq!(b.first_difference_after(&used, l.prefix_bytes(n)), None);
            let written = b.restore(&mut used, Some(n));
            assert_eq!(written, l.prefix_bytes(n).min(img.size_bytes()));
            assert_eq!(used.bytes(), img.bytes(), "n={n}");
        }
    }

    #[test]
    fn writes_beyond_the_prefix_are_found_and_a_full_restore_fixes_them() {
        let (img, l) = blank(64, 32, 100);
        let b = BlankImage::new(img.clone(), Some(l));
        let mut used = b.new_image();
        decode_into(&mut used, l, 2);
        let stray = img.size_bytes() - 5;
        used.bytes_mut()[stray] = 1;
        assert_eq!(
            b.first_difference_after(&used, l.prefix_bytes(2)),
            Some(stray)
        );
        // Inside the head too.
        let mut used2 = b.new_image();
        used2.bytes_mut()[10] ^= 0xFF;
        assert_eq!(b.first_difference_after(&used2, 0), Some(10));
        b.restore(&mut used, None);
        assert_eq!(used.bytes(), img.bytes());
    }

    #[test]
    fn differing_ranges_are_merged() {
        let (img, l) = blank(64, 32, 100);
        let b = BlankImage::new(img, Some(l));
        let mut used = b.new_image();
        decode_into(&mut used, l, 2);
        let r = b.differing_ranges(&used, 8, 10);
        assert_eq!(r, vec![(0, 1), (64, 128)]);
    }

    /// A blank image whose slots all hold the same non-zero bytes, as CUPTI makes them.
    fn periodic(header: usize, per: usize, cap: usize) -> (CounterData, ImageLayout) {
        let l = ImageLayout {
            header_bytes: header,
            bytes_per_sample: per,
        };
        let mut bytes = vec![7u8; header];
        for _ in 0..cap {
            bytes.extend((0..per).map(|i| (i % 5) as u8 + 1));
        }
        (CounterData::from_bytes(bytes, cap as u32), l)
    }

    #[test]
    fn periodic_blanks_are_kept_as_header_and_one_slot() {
        let (img, l) = periodic(40, 24, 1000);
        let b = BlankImage::new(img.clone(), Some(l));
        assert!(b.is_periodic());
        assert_eq!(b.kept_bytes(), 40 + 24);
        assert_eq!(b.new_image().bytes(), img.bytes());
        for n in [0usize, 1, 17, 999, 1000] {
            let mut used = b.new_image();
            decode_into(&mut used, l, n.min(1000));
            assert_eq!(b.first_difference_after(&used, l.prefix_bytes(n)), None);
            b.restore(&mut used, Some(n));
            assert_eq!(used.bytes(), img.bytes(), "n={n}");
        }
        let mut used = b.new_image();
        decode_into(&mut used, l, 3);
        // 0x55 never equals the slot pattern (1..=5): the three slots are one range.
        assert_eq!(
            b.differing_ranges(&used, 0, 10),
            vec![(0, 1), (40, 40 + 3 * 24)]
        );
        used.bytes_mut()[40 + 500 * 24 + 3] = 0;
        assert_eq!(
            b.first_difference_after(&used, l.prefix_bytes(3)),
            Some(40 + 500 * 24 + 3)
        );
    }

    #[test]
    fn a_layout_without_repeating_slots_falls_back_to_the_head() {
        let (mut img, l) = periodic(40, 24, 10);
        img.bytes_mut()[40 + 5 * 24 + 1] = 99;
        let b = BlankImage::new(img.clone(), Some(l));
        assert!(!b.is_periodic());
        assert_eq!(b.new_image().bytes(), img.bytes());
    }

    #[test]
    fn restore_without_layout_is_whole() {
        let (img, _) = blank(64, 32, 10);
        let b = BlankImage::new(img.clone(), None);
        let mut used = b.new_image();
        used.bytes_mut().fill(3);
        assert_eq!(b.restore(&mut used, Some(1)), img.size_bytes());
        assert_eq!(used.bytes(), img.bytes());
    }
}
