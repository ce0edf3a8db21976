//! Loading the CUDA driver and libcupti and initialising the profiler: [`Cupti`], the proof
//! that this was done, with the devices' facts and chip names, and [`PrimaryContext`].

use crate::error::{CuptiError, Result};
use crate::loader;
use crate::result::{self, cstr_to_string};
use cudarc::cupti::sys;
use std::ffi::CStr;
use std::sync::Mutex;

static PROFILER_INITIALIZED: Mutex<bool> = Mutex::new(false);

/// Facts about one CUDA device, from the driver.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceFacts {
    /// CUDA ordinal (respects `CUDA_VISIBLE_DEVICES`).
    pub index: usize,
    pub name: String,
    /// `GPU-xxxxxxxx-...` as nvidia-smi prints it.
    pub uuid: String,
    pub pci_bus_id: String,
    pub sm_count: Option<u32>,
    pub memory_total_bytes: Option<u64>,
}

/// Handle proving that the CUDA driver and CUPTI are loaded and the CUPTI profiler is
/// initialised in this process. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Cupti {
    device_count: usize,
    /// Where libcupti was found (for `cufall info` and error reports).
    pub cupti_source: String,
}

/// Loads the driver, counts devices; does not need CUPTI. Errors say what to do.
pub fn driver_devices() -> Result<Vec<DeviceFacts>> {
    loader::ensure_driver()?;
    cudarc::driver::result::init().map_err(|e| CuptiError::DriverInit(format!("{:?}", e.0)))?;
    let count = cudarc::driver::result::device::get_count()
        .map_err(|e| CuptiError::DriverInit(format!("{:?}", e.0)))?;
    let count = usize::try_from(count).unwrap_or(0);
    (0..count).map(device_facts).collect()
}

fn device_facts(index: usize) -> Result<DeviceFacts> {
    use cudarc::driver::{result as dr, sys as ds};
    let err = |e: cudarc::driver::DriverError| CuptiError::DriverInit(format!("{:?}", e.0));
    let ordinal =
        i32::try_from(index).map_err(|_| CuptiError::DeviceOutOfRange { index, count: 0 })?;
    let dev = dr::device::get(ordinal).map_err(err)?;
    let name = dr::device::get_name(dev).map_err(err)?;
    let uuid = dr::device::get_uuid(dev)
        .map(|u| format_uuid(&u.bytes.map(|b| b as u8)))
        .unwrap_or_default();
    // SAFETY: `dev` is a valid device handle from cuDeviceGet.
    let mem = unsafe { dr::device::total_mem(dev) }.ok().map(|m| m as u64);
    // SAFETY: as above; the attribute is a plain integer query.
    let sms = unsafe {
        dr::device::get_attribute(
            dev,
            ds::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
    }
    .ok()
    .and_then(|v| u32::try_from(v).ok());
    const LEN: i32 = 32;
    let mut buf = [0 as core::ffi::c_char; LEN as usize];
    // SAFETY: `buf` is writable for its full length, which we pass; `dev` is valid.
    let r = unsafe { ds::cuDeviceGetPCIBusId(buf.as_mut_ptr(), LEN, dev) };
    let pci_bus_id = if r == ds::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver wrote a NUL-terminated string into `buf` (it is 32 bytes, the
        // documented maximum is 13).
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    } else {
        String::new()
    };
    Ok(DeviceFacts {
        index,
        name,
        uuid,
        pci_bus_id,
        sm_count: sms,
        memory_total_bytes: mem,
    })
}

/// `GPU-8-4-4-4-12` formatting of a 16-byte UUID, as NVML and nvidia-smi print it.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

impl Cupti {
    /// Loads the driver and libcupti and initialises the CUPTI profiler (once per process).
    pub fn init() -> Result<Self> {
        loader::ensure_driver()?;
        cudarc::driver::result::init().map_err(|e| CuptiError::DriverInit(format!("{:?}", e.0)))?;
        let count = cudarc::driver::result::device::get_count()
            .map_err(|e| CuptiError::DriverInit(format!("{:?}", e.0)))?;
        let device_count = usize::try_from(count).unwrap_or(0);
        if device_count == 0 {
            return Err(CuptiError::NoDevice);
        }
        let cupti_source = loader::ensure_cupti()?;
        let mut done = PROFILER_INITIALIZED
            .lock()
            .map_err(|_| CuptiError::InvalidArgument("profiler lock poisoned".into()))?;
        if !*done {
            let mut p = sys::CUpti_Profiler_Initialize_Params {
                structSize: sys::Profiler_Initialize_Params_STRUCT_SIZE as usize,
                pPriv: std::ptr::null_mut(),
            };
            // SAFETY: libcupti is loaded; the struct holds no pointers.
            unsafe { result::profiler_initialize(&mut p) }?;
            *done = true;
        }
        Ok(Cupti {
            device_count,
            cupti_source,
        })
    }

    pub fn device_count(&self) -> usize {
        self.device_count
    }

    /// Errors with [`CuptiError::DeviceOutOfRange`] unless `index` is a visible device.
    pub fn check_device(&self, index: usize) -> Result<()> {
        if index < self.device_count {
            Ok(())
        } else {
            Err(CuptiError::DeviceOutOfRange {
                index,
                count: self.device_count,
            })
        }
    }

    pub fn device_facts(&self, index: usize) -> Result<DeviceFacts> {
        self.check_device(index)?;
        device_facts(index)
    }

    /// The chip name CUPTI uses for `index`, e.g. `GH100`.
    ///
    /// [cuptiDeviceGetChipName](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__API.html)
    pub fn chip_name(&self, index: usize) -> Result<String> {
        self.check_device(index)?;
        let mut p = sys::CUpti_Device_GetChipName_Params {
            structSize: sys::Device_GetChipName_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            deviceIndex: index,
            pChipName: std::ptr::null(),
        };
        // SAFETY: libcupti is loaded (we hold a `Cupti`); the out-pointer field is in `p`.
        unsafe { result::device_get_chip_name(&mut p) }?;
        Ok(cstr_to_string(p.pChipName))
    }

    /// The PM-sampling counter availability image of `index` (which counters the device lets
    /// this process read now). This is where missing privileges usually show up.
    ///
    /// [cuptiPmSamplingGetCounterAvailability](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn pm_counter_availability(&self, index: usize) -> Result<Vec<u8>> {
        self.check_device(index)?;
        let mut p = sys::CUpti_PmSampling_GetCounterAvailability_Params {
            structSize: sys::PmSampling_GetCounterAvailability_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            deviceIndex: index,
            counterAvailabilityImageSize: 0,
            pCounterAvailabilityImage: std::ptr::null_mut(),
        };
        // SAFETY: a null image pointer asks only for the size.
        unsafe { result::pm_get_counter_availability(&mut p) }?;
        let mut image = vec![0u8; p.counterAvailabilityImageSize];
        p.pCounterAvailabilityImage = image.as_mut_ptr();
        // SAFETY: `image` is writable for `counterAvailabilityImageSize` bytes and outlives the
        // call.
        unsafe { result::pm_get_counter_availability(&mut p) }?;
        Ok(image)
    }
}

/// The device's primary CUDA context, retained and made current on this thread; released on
/// drop. PM sampling is device-wide and normally needs no context; [`crate::PmSampler`] users fall
/// back to this when CUPTI asks for one.
#[derive(Debug)]
pub struct PrimaryContext {
    dev: cudarc::driver::sys::CUdevice,
}

impl Cupti {
    /// [cuDevicePrimaryCtxRetain](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)
    /// and [cuCtxSetCurrent](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html).
    pub fn bind_primary_context(&self, index: usize) -> Result<PrimaryContext> {
        self.check_device(index)?;
        let err = |e: cudarc::driver::DriverError| CuptiError::DriverInit(format!("{:?}", e.0));
        let ordinal = i32::try_from(index).map_err(|_| CuptiError::DeviceOutOfRange {
            index,
            count: self.device_count,
        })?;
        let dev = cudarc::driver::result::device::get(ordinal).map_err(err)?;
        // SAFETY: `dev` is a valid device; the retain is balanced by the release in Drop.
        let ctx = unsafe { cudarc::driver::result::primary_ctx::retain(dev) }.map_err(err)?;
        let bound = PrimaryContext { dev };
        // SAFETY: `ctx` was just retained and stays alive until `bound` is dropped.
        unsafe { cudarc::driver::result::ctx::set_current(ctx) }.map_err(err)?;
        Ok(bound)
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `bind_primary_context`; errors cannot be reported here.
        let _ = unsafe { cudarc::driver::result::primary_ctx::release(self.dev) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_formatted_like_nvidia_smi() {
        let b: [u8; 16] = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(format_uuid(&b), "GPU-12345678-9abc-def0-0123-456789abcdef");
    }
}
