//! Finding a GPU and opening it: adapter discovery (for `murmur devices` and
//! `--device`), and a device opened with the adapter's OWN limits — wgpu's
//! defaults cap storage bindings at 128 MiB, less than gpt2-124m's embedding.

use thiserror::Error;

/// Why no GPU device could be opened.
#[derive(Debug, Error)]
pub enum GpuError {
    #[error("no GPU adapter found (install a Vulkan, Metal or DX12 driver; for a software one on Debian: apt-get install mesa-vulkan-drivers)")]
    NoAdapter,
    #[error(
        "no hardware GPU adapter found (only software adapters: {0}); pass --device gpu to use one anyway"
    )]
    OnlySoftware(String),
    #[error(
        "GPU `{0}` has no 16×16 f16 cooperative matrices with 32-wide subgroups (tensor cores through \
         VK_KHR_cooperative_matrix); choose another matmul configuration"
    )]
    NoCooperativeMatrices(String),
    #[error("MURMUR_GPU_TILES={0}: no such matmul configuration; choose small, large, wide, coop-small or coop-large")]
    UnknownTiles(String),
    #[error("could not open GPU device `{name}`: {source}")]
    RequestDevice {
        name: String,
        #[source]
        source: wgpu::RequestDeviceError,
    },
}

/// One adapter as `murmur devices` reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    /// A software rasterizer (llvmpipe/lavapipe, WARP): never chosen by `auto`.
    pub software: bool,
    pub driver: String,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub min_storage_buffer_offset_alignment: u32,
    pub subgroup_sizes: (u32, u32),
    /// 16×16×16 f16→f32 subgroup matrices with 32-wide subgroups: the
    /// matmul runs on them under `--precision f16`.
    pub cooperative_matrix_f16: bool,
    pub features: Vec<String>,
}

/// Which adapters a backend may be opened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterChoice {
    /// Hardware GPUs only (integrated or discrete); `--device auto`.
    HardwareOnly,
    /// Any adapter, software ones included; `--device gpu`.
    Any,
}

/// Keeps the adapter probe quiet on headless machines. Mesa's implicit Vulkan
/// layer VK_LAYER_MESA_device_select connects to the Wayland display while
/// devices are enumerated (only to reorder them; `adapters` ranks them
/// itself), and libwayland prints `error: XDG_RUNTIME_DIR is invalid or not
/// set in the environment.` when there is none. `NODEVICE_SELECT=1` is the
/// layer's own off switch; a value the user set is kept. Call it before any
/// other thread starts (the binary does, first thing in `main`).
pub fn quiet_probe_env() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
}

/// An instance with Vulkan, Metal and DX12 only. GL is never used (see
/// `adapters`), and initialising it opens a display connection (EGL, then
/// Wayland), which on a headless machine prints `error: XDG_RUNTIME_DIR is
/// invalid or not set` to stderr from the C library.
fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends &= wgpu::Backends::PRIMARY;
    wgpu::Instance::new(desc)
}

fn is_software(info: &wgpu::AdapterInfo) -> bool {
    info.device_type == wgpu::DeviceType::Cpu
}

/// Preference order: discrete, integrated, virtual, other, software.
fn rank(info: &wgpu::AdapterInfo) -> u8 {
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn adapters() -> Vec<wgpu::Adapter> {
    let mut all = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::PRIMARY));
    // Vulkan, Metal and DX12 only (GL's compute support is partial); the
    // kernels bind up to 6 storage buffers at once.
    all.retain(|a| a.limits().max_storage_buffers_per_shader_stage >= 6);
    all.sort_by_key(|a| rank(&a.get_info()));
    all
}

/// Every adapter this machine exposes, best first.
pub fn list_adapters() -> Vec<AdapterSummary> {
    adapters().iter().map(summarize).collect()
}

/// True when some adapter qualifies under `choice` (cheap: opens no device).
pub fn adapter_available(choice: AdapterChoice) -> bool {
    adapters().iter().any(|a| choice == AdapterChoice::Any || !is_software(&a.get_info()))
}

fn summarize(a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    let l = a.limits();
    AdapterSummary {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        software: is_software(&info),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        max_buffer_size: l.max_buffer_size,
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
        cooperative_matrix_f16: has_coop_f16(a),
        features: a.features().iter_names().map(|(name, _)| name.to_string()).collect(),
    }
}

/// Whether matmul_coop.wgsl runs on the adapter: f16 shaders, cooperative
/// matrices with a 16×16×16 f16 × f16 → f32 configuration, and subgroups of
/// exactly 32 (the kernel counts a subgroup as 32 consecutive invocations).
fn has_coop_f16(a: &wgpu::Adapter) -> bool {
    use wgpu::CooperativeScalarType as S;
    let info = a.get_info();
    let needed = wgpu::Features::SHADER_F16 | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    a.features().contains(needed)
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && a.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16) && p.ab_type == S::F16 && p.cr_type == S::F32
        })
}

/// An open device and what the kernels need to know about it.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// The device was opened with f16 cooperative matrices (`has_coop_f16`).
    pub coop_f16: bool,
}

impl GpuContext {
    /// Opens the best adapter allowed by `choice`, with its own limits; with
    /// `want_coop`, also with f16 cooperative matrices where it has them.
    pub fn open(choice: AdapterChoice, want_coop: bool) -> Result<Self, GpuError> {
        let all = adapters();
        let software: Vec<String> =
            all.iter().filter(|a| is_software(&a.get_info())).map(|a| a.get_info().name).collect();
        let adapter = all
            .into_iter()
            .find(|a| choice == AdapterChoice::Any || !is_software(&a.get_info()))
            .ok_or_else(|| {
            if software.is_empty() {
                GpuError::NoAdapter
            } else {
                GpuError::OnlySoftware(software.join(", "))
            }
        })?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let coop_f16 = want_coop && has_coop_f16(&adapter);
        let mut desc = wgpu::DeviceDescriptor {
            label: Some("murmur"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        };
        if coop_f16 {
            desc.required_features =
                wgpu::Features::SHADER_F16 | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: the only experimental feature asked for is cooperative
            // matrices, used by matmul_coop.wgsl alone, whose results the
            // oracle tests check on the GPU (MURMUR_REQUIRE_COOP=1).
            desc.experimental_features = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|source| GpuError::RequestDevice { name: info.name.clone(), source })?;
        let limits = device.limits();
        Ok(GpuContext { device, queue, info, limits, coop_f16 })
    }

    pub fn is_software(&self) -> bool {
        is_software(&self.info)
    }
}
