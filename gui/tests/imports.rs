//! The modules of `gui/src` import one another one way (ARCHITECTURE.md's `cufall-gui` row):
//! data structures ← `loaded` ← the loader ← `view` ← the views ← `app`, with no circle among
//! the files. The graph is `cufall_testkit::imports`' (every crate has this test); here it is
//! also checked on edges known to exist, so that the test cannot pass by reading nothing.

use cufall_testkit::imports::{assert_one_way, graph};
use std::path::PathBuf;

fn gui_lib() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")
}

#[test]
fn gui_modules_import_one_another_one_way() {
    assert_one_way("gui/src", &gui_lib());
}

#[test]
fn the_graph_sees_the_imports_it_should() {
    let g = graph(&gui_lib());
    let has = |a: &str, b: &str| g.get(a).is_some_and(|s| s.contains(b));
    assert!(has("app", "timeline"), "{g:#?}");
    assert!(has("app", "panel"));
    assert!(has("panel", "view"));
    assert!(has("timeline", "timeline::tracks"));
    assert!(has("timeline::tracks", "timeline::geom"));
    assert!(has("timeline::rows", "timeline::layout"));
    assert!(has("data", "loaded"));
    assert!(!has("panel", "app") && !has("timeline", "app"));
}
