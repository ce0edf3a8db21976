//! The "Browse…" window: a folder browser that opens recordings. A recording is a folder
//! (`NAME.cufall/` with a `manifest.json`), which the platform's file dialogs pick badly, so the
//! window lists folders, marks recordings, and opens one with a click.

use eframe::egui;
use std::path::{Path, PathBuf};

/// One entry of a listed folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// A recording (it holds a `manifest.json`), opened on click; else a folder to enter.
    pub is_trace: bool,
}

/// The folders inside `dir`, recordings first, then by name; plain files are left out.
pub fn list(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut out: Vec<Entry> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| Entry {
            name: e.file_name().to_string_lossy().into_owned(),
            is_trace: e.path().join(cufall_trace::MANIFEST_FILE).is_file(),
        })
        .filter(|e| !e.name.starts_with('.'))
        .collect();
    out.sort_by(|a, b| {
        b.is_trace
            .cmp(&a.is_trace)
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(out)
}

/// The browser's state while it is open.
#[derive(Clone, Debug, PartialEq)]
pub struct Browser {
    pub dir: PathBuf,
    entries: Result<Vec<Entry>, String>,
}

impl Browser {
    /// A browser showing `dir`.
    pub fn at(dir: PathBuf) -> Browser {
        let entries = list(&dir).map_err(|e| e.to_string());
        Browser { dir, entries }
    }

    /// Draws the window; returns the recording the user picked. `open` turns false when the
    /// window is closed.
    pub fn ui(&mut self, ctx: &egui::Context, open: &mut bool) -> Option<PathBuf> {
        let mut picked = None;
        let mut go = None;
        egui::Window::new("Open a recording")
            .open(open)
            .default_size([460.0, 420.0])
            .show(ctx, |ui| {
                ui.horizontal(|ui| {
                    if ui.button("⬆ up").clicked()
                        && let Some(parent) = self.dir.parent()
                    {
                        go = Some(parent.to_path_buf());
                    }
                    ui.label(self.dir.display().to_string());
                });
                ui.separator();
                egui::ScrollArea::vertical().show(ui, |ui| match &self.entries {
                    Err(e) => {
                        ui.colored_label(egui::Color32::LIGHT_RED, format!("cannot list: {e}"));
                    }
                    Ok(list) if list.is_empty() => {
                        ui.weak("no folders here");
                    }
                    Ok(list) => {
                        for e in list {
                            let text = if e.is_trace {
                                format!("▶ {}", e.name)
                            } else {
                                format!("📁 {}/", e.name)
                            };
                            let resp = ui.selectable_label(false, text);
                            if resp.clicked() {
                                let path = self.dir.join(&e.name);
                                if e.is_trace {
                                    picked = Some(path);
                                } else {
                                    go = Some(path);
                                }
                            }
                        }
                    }
                });
            });
        if let Some(dir) = go {
            *self = Browser::at(dir);
        }
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_come_first_and_files_are_left_out() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(d.path().join("zeta")).expect("mkdir");
        std::fs::create_dir(d.path().join("b.cufall")).expect("mkdir");
        std::fs::write(d.path().join("b.cufall").join("manifest.json"), "{}").expect("write");
        std::fs::create_dir(d.path().join("alpha")).expect("mkdir");
        std::fs::create_dir(d.path().join(".hidden")).expect("mkdir");
        std::fs::write(d.path().join("notes.txt"), "x").expect("write");
        let names: Vec<(String, bool)> = list(d.path())
            .expect("list")
            .into_iter()
            .map(|e| (e.name, e.is_trace))
            .collect();
        assert_eq!(
            names,
            vec![
                ("b.cufall".to_string(), true),
                ("alpha".to_string(), false),
                ("zeta".to_string(), false)
            ]
        );
    }

    #[test]
    fn a_missing_folder_is_an_error_in_the_window() {
        let b = Browser::at(PathBuf::from("/no/such/folder/for/cufall"));
        assert!(b.entries.is_err());
    }
}
