//! The flame graph of a selected time range, drawn as an icicle (outermost frames on top): the
//! host samples in the range merged by their stacks, each frame as wide as the samples that
//! passed through it. Built off the drawing code ([`Icicle::build`]) and laid out in sample
//! units, so the side panel only scales it to its width.

use crate::host_threads::{HostStacks, HostThread};

/// One box of the icicle: a frame reached by one path from the outermost frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// In [`HostStacks::frames`].
    pub frame: u32,
    /// 0: an outermost frame.
    pub depth: u32,
    /// Samples before this box on its row, counted from the left edge: the box spans
    /// `[start, start + count)` samples.
    pub start: u64,
    /// Samples whose stack passed through this frame by this path.
    pub count: u64,
    /// Of those, the samples in which this frame was the innermost (running itself).
    pub own: u64,
    /// Index of the parent box; `None` for an outermost frame.
    pub parent: Option<usize>,
}

/// The laid-out flame graph of some samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Icicle {
    /// Parents before children; siblings in the order of their function names (then frame),
    /// so the picture does not change when the samples arrive in another order.
    pub nodes: Vec<Node>,
    /// Samples with a stack: the width of the whole graph.
    pub total: u64,
    /// Samples whose stack the stacks table does not hold (not drawn).
    pub unknown: u64,
    pub depth: u32,
}

/// A box while the tree is built: its frame, its children by frame, counts.
#[derive(Default)]
struct Building {
    children: Vec<(u32, usize)>,
    count: u64,
    own: u64,
}

impl Icicle {
    /// The icicle of the samples of `threads` that start in `[t0, t1)` (each recording's own
    /// clock).
    pub fn build<'a>(
        host: &HostStacks,
        threads: impl IntoIterator<Item = &'a HostThread>,
        t0: i64,
        t1: i64,
    ) -> Icicle {
        // Box 0 is a root standing for "all samples"; it is not drawn.
        let mut tree: Vec<Building> = vec![Building::default()];
        let mut unknown = 0;
        for th in threads {
            for i in th.between(t0, t1) {
                let stack = host.stack(th.stack[i]);
                if stack.is_empty() {
                    unknown += 1;
                    continue;
                }
                let mut at = 0;
                tree[0].count += 1;
                for &f in stack.iter().rev() {
                    let found = tree[at]
                        .children
                        .iter()
                        .find(|(cf, _)| *cf == f)
                        .map(|c| c.1);
                    at = match found {
                        Some(c) => c,
                        None => {
                            tree.push(Building::default());
                            let c = tree.len() - 1;
                            tree[at].children.push((f, c));
                            c
                        }
                    };
                    tree[at].count += 1;
                }
                tree[at].own += 1;
            }
        }
        let mut out = Icicle {
            total: tree[0].count,
            unknown,
            ..Icicle::default()
        };
        // Breadth-first, so parents come before children and each row is laid out left to
        // right: (tree box, parent in `out`, depth, start).
        let mut queue = std::collections::VecDeque::from([(0usize, None, 0u32, 0u64)]);
        while let Some((b, parent, depth, start)) = queue.pop_front() {
            let mut kids = tree[b].children.clone();
            kids.sort_by(|x, y| {
                let name = |f: u32| {
                    host.frames
                        .get(f as usize)
                        .map_or("", |fr| host.names.get(fr.function))
                };
                name(x.0).cmp(name(y.0)).then(x.0.cmp(&y.0))
            });
            let mut x = start;
            for (frame, c) in kids {
                out.nodes.push(Node {
                    frame,
                    depth,
                    start: x,
                    count: tree[c].count,
                    own: tree[c].own,
                    parent,
                });
                out.depth = out.depth.max(depth + 1);
                queue.push_back((c, Some(out.nodes.len() - 1), depth + 1, x));
                x += tree[c].count;
            }
        }
        out
    }

    /// The box at sample position `x` (0 to [`Icicle::total`]) on row `depth`.
    pub fn at(&self, depth: u32, x: f64) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.depth == depth && x >= n.start as f64 && x < (n.start + n.count) as f64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;
    use cufall_trace::model::{HostSample, StackFrame};

    fn frame(stack_id: u64, depth: u32, function: &str) -> StackFrame {
        StackFrame {
            stack_id,
            depth,
            function: function.into(),
            ..Default::default()
        }
    }

    /// Stacks (outermost first): 1 main>step>b, 2 main>step>a, 3 main>load, 4 main>step.
    fn host(order: &[(i64, u64)]) -> HostStacks {
        let mut frames = Vec::new();
        for (id, names) in [
            (1, vec!["b", "step", "main"]),
            (2, vec!["a", "step", "main"]),
            (3, vec!["load", "main"]),
            (4, vec!["step", "main"]),
        ] {
            for (d, n) in names.into_iter().enumerate() {
                frames.push(frame(id, d as u32, n));
            }
        }
        let samples = order
            .iter()
            .map(|&(t_ns, stack_id)| HostSample {
                t_ns,
                pid: 1,
                tid: 1,
                stack_id,
                ..Default::default()
            })
            .collect();
        HostStacks::build(frames, samples)
    }

    fn name(h: &HostStacks, n: &Node) -> String {
        h.names.get(h.frames[n.frame as usize].function).to_string()
    }

    #[test]
    fn widths_sum_to_the_parent_and_order_is_stable() {
        // 3 × b, 2 × a, 1 × load, 1 × step alone, 1 unknown stack; one sample out of range.
        let order = [
            (0, 1),
            (1, 2),
            (2, 1),
            (3, 3),
            (4, 4),
            (5, 2),
            (6, 1),
            (7, 99),
            (100, 1),
        ];
        let h = host(&order);
        let ic = Icicle::build(&h, &h.threads, 0, 50);
        assert_eq!(ic.total, 7);
        assert_eq!(ic.unknown, 1);
        assert_eq!(ic.depth, 3);
        let rows: Vec<(u32, String, u64, u64)> = ic
            .nodes
            .iter()
            .map(|n| (n.depth, name(&h, n), n.start, n.count))
            .collect();
        assert_eq!(
            rows,
            [
                (0, "main".into(), 0, 7),
                (1, "load".into(), 0, 1),
                (1, "step".into(), 1, 6),
                (2, "a".into(), 1, 2),
                (2, "b".into(), 3, 3),
            ]
        );
        for (i, n) in ic.nodes.iter().enumerate() {
            let kids: u64 = ic
                .nodes
                .iter()
                .filter(|c| c.parent == Some(i))
                .map(|c| c.count)
                .sum();
            assert_eq!(kids + n.own, n.count, "{}", name(&h, n));
            if let Some(p) = n.parent {
                let p = &ic.nodes[p];
                assert!(n.start >= p.start && n.start + n.count <= p.start + p.count);
            }
        }
        // The same samples in another order give the same picture.
        let mut shuffled = order;
        shuffled.reverse();
        let h2 = host(&shuffled);
        assert_eq!(Icicle::build(&h2, &h2.threads, 0, 50), ic);
        assert_eq!(ic.at(2, 3.5).map(|n| name(&h, n)), Some("b".into()));
        assert_eq!(ic.at(1, 0.5).map(|n| name(&h, n)), Some("load".into()));
        assert!(ic.at(2, 0.5).is_none());
    }

    #[test]
    fn an_empty_range_is_an_empty_graph() {
        let h = host(&[(0, 1)]);
        let ic = Icicle::build(&h, &h.threads, 10, 20);
        assert_eq!(ic, Icicle::default());
    }
}
