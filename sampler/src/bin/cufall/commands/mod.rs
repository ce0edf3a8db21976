//! The binary's own commands, which the library never uses: the live view (the bare `cufall`,
//! which drives the viewer's live loop) and `gui` (the desktop timeline). Every other command is
//! in `cufall_sampler::commands`.

#[cfg(feature = "gui")]
pub mod gui;
pub mod live;
