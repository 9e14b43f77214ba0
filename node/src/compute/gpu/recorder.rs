//! The command stream: kernels are recorded into one pending command encoder
//! and submitted together (at a download, or when the argument arena fills),
//! so a training step is a handful of submits. Kernel arguments go into a
//! uniform arena, one 256-byte slot per dispatch, written once per submit.
//! Uploads are copies recorded in the same stream, so they stay in order
//! with the kernels around them.

use std::sync::Mutex;

use wgpu::util::DeviceExt;

use super::memory::{TransferStats, View};

/// Bytes per argument slot (the largest uniform-offset alignment WebGPU allows).
const ARGS_STRIDE: usize = 256;
/// Dispatches per submit before the arena is flushed.
const ARGS_SLOTS: usize = 1024;

struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    args: Vec<u8>,
}

/// Records kernels and copies, and moves tensors between host and device.
pub struct Recorder {
    device: wgpu::Device,
    queue: wgpu::Queue,
    arena: wgpu::Buffer,
    pending: Mutex<Pending>,
    stats: Mutex<TransferStats>,
}

impl Recorder {
    pub fn new(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let arena = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kernel arguments"),
            size: (ARGS_STRIDE * ARGS_SLOTS) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Recorder {
            device,
            queue,
            arena,
            pending: Mutex::new(Pending { encoder: None, args: Vec::new() }),
            stats: Mutex::new(TransferStats::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut TransferStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub fn transfer_stats(&self) -> TransferStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn reset_transfer_stats(&self) {
        self.count(|s| *s = TransferStats::default());
    }

    fn encoder<'a>(&self, p: &'a mut Pending) -> &'a mut wgpu::CommandEncoder {
        p.encoder.get_or_insert_with(|| {
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("murmur step") })
        })
    }

    fn submit(&self, p: &mut Pending) {
        if let Some(encoder) = p.encoder.take() {
            if !p.args.is_empty() {
                self.queue.write_buffer(&self.arena, 0, &p.args);
                p.args.clear();
            }
            self.queue.submit([encoder.finish()]);
            self.count(|s| s.submits += 1);
        }
    }

    /// Submits everything recorded so far.
    pub fn flush(&self) {
        let mut p = self.lock();
        self.submit(&mut p);
    }

    /// Records one dispatch of `pipeline` with `args` (binding 0, uniform) and
    /// the storage `views` at their binding numbers.
    pub fn dispatch(
        &self,
        pipeline: &wgpu::ComputePipeline,
        args: &[u32],
        views: &[(u32, View<'_>)],
        groups: (u32, u32, u32),
    ) {
        if groups.0 == 0 || groups.1 == 0 || groups.2 == 0 {
            return;
        }
        let mut p = self.lock();
        if p.args.len() / ARGS_STRIDE >= ARGS_SLOTS {
            self.submit(&mut p);
        }
        let slot = p.args.len();
        p.args.extend(args.iter().flat_map(|w| w.to_le_bytes()));
        p.args.resize(slot + ARGS_STRIDE, 0);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.arena,
                offset: slot as u64,
                size: wgpu::BufferSize::new(ARGS_STRIDE as u64),
            }),
        }];
        entries.extend(views.iter().map(|(binding, v)| wgpu::BindGroupEntry {
            binding: *binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: v.buffer,
                offset: v.offset,
                size: wgpu::BufferSize::new(v.size),
            }),
        }));
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let encoder = self.encoder(&mut p);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
    }

    /// A zeroed device buffer of `bytes` (rounded up to 16).
    pub fn buffer(&self, bytes: u64, label: &str) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(16).div_ceil(16) * 16,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// Records a clear of the whole buffer.
    pub fn clear(&self, buffer: &wgpu::Buffer) {
        let mut p = self.lock();
        self.encoder(&mut p).clear_buffer(buffer, 0, None);
    }

    /// Records a copy of `bytes` into the start of `dst`.
    fn write(&self, dst: &wgpu::Buffer, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let staging = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("upload"),
            contents: bytes,
            usage: wgpu::BufferUsages::COPY_SRC,
        });
        let mut p = self.lock();
        self.encoder(&mut p).copy_buffer_to_buffer(&staging, 0, dst, 0, bytes.len() as u64);
    }

    /// Uploads a tensor's values (counted).
    pub fn upload_tensor(&self, dst: &wgpu::Buffer, src: &[f32]) {
        self.write(dst, bytemuck::cast_slice(src));
        self.count(|s| {
            s.tensor_uploads += 1;
            s.bytes_up += 4 * src.len() as u64;
        });
    }

    /// Uploads token ids with their grouping (counted).
    pub fn upload_tokens(&self, dst: &wgpu::Buffer, words: &[u32]) {
        self.write(dst, bytemuck::cast_slice(words));
        self.count(|s| {
            s.token_uploads += 1;
            s.bytes_up += 4 * words.len() as u64;
        });
    }

    /// Submits pending work and reads `len` floats from `src` (counted).
    pub fn download(&self, src: &wgpu::Buffer, len: usize) -> Vec<f32> {
        let bytes = (4 * len as u64).div_ceil(4) * 4;
        if bytes == 0 {
            return Vec::new();
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("download"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        {
            let mut p = self.lock();
            self.encoder(&mut p).copy_buffer_to_buffer(src, 0, &staging, 0, bytes);
            self.submit(&mut p);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        let mapped = rx.recv().ok().and_then(|r| r.ok());
        if polled.is_err() || mapped.is_none() {
            // A lost device leaves nothing to read: report NaNs, which every
            // caller treats as a failed step.
            return vec![f32::NAN; len];
        }
        let out: Vec<f32> = match staging.get_mapped_range(..) {
            Ok(view) => view[..4 * len]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Err(_) => vec![f32::NAN; len],
        };
        staging.unmap();
        self.count(|s| {
            s.downloads += 1;
            s.bytes_down += bytes;
        });
        out
    }
}
