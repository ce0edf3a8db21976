//! A host-side counter data image: what [`crate::PmSampler::decode`] fills and
//! [`crate::BlankImage`] makes blank again.

use crate::error::Result;
use crate::result;
use cudarc::cupti::sys;

/// Fill state of a counter data image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CounterDataInfo {
    pub total: usize,
    pub populated: usize,
    pub completed: usize,
}

/// A host-side counter data image with room for a fixed number of samples.
///
/// An initialised image is plain bytes without pointers (CUPTI's images are designed to be
/// written to files), so a used image can be made blank again from a [`crate::BlankImage`], on
/// any thread, without calling CUPTI.
#[derive(Clone, Debug)]
pub struct CounterData {
    bytes: Vec<u8>,
    capacity: u32,
}

impl CounterData {
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn from_bytes(bytes: Vec<u8>, capacity: u32) -> CounterData {
        CounterData { bytes, capacity }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// [cuptiPmSamplingGetCounterDataInfo](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn info(&self) -> Result<CounterDataInfo> {
        let mut p = sys::CUpti_PmSampling_GetCounterDataInfo_Params {
            structSize: sys::PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pCounterDataImage: self.bytes.as_ptr(),
            counterDataImageSize: self.bytes.len(),
            numTotalSamples: 0,
            numPopulatedSamples: 0,
            numCompletedSamples: 0,
        };
        // SAFETY: an image only exists once libcupti is loaded; the image is live and sized.
        unsafe { result::pm_get_counter_data_info(&mut p) }?;
        Ok(CounterDataInfo {
            total: p.numTotalSamples,
            populated: p.numPopulatedSamples,
            completed: p.numCompletedSamples,
        })
    }
}
