//! The daemons a node daemon starts for the launcher in a tree of daemons
//! ([`NodeMessage::Children`]), and what it does with their frames: reports on ranks go up as
//! they are; a fence goes up once this host and every child have entered it; answers for a
//! child's ranks and the end of a fence go down to it; signals and STOP go to every child.

use super::Event;
use crate::remote::{CommandForm, NodeEvent, Nodes};
use ferry_wire::node::{ChildNode, NodeMessage};
use std::sync::mpsc::Sender;

/// The children of one daemon and where each stands.
pub(super) struct Children {
    nodes: Nodes,
    started: std::time::Instant,
    /// How long a child may stay silent (`FERRY_CONNECT_TIMEOUT` of this daemon).
    connect_timeout: std::time::Duration,
    /// Per child: its ranks, how many of them have ended, whether it is in the current fence
    /// and whether its output has ended.
    state: Vec<Child>,
}

struct Child {
    ranks: Vec<u32>,
    exited: usize,
    fenced: bool,
    closed: bool,
    /// It has said something, or has been reported silent.
    heard: bool,
}

impl Children {
    /// Starts `nodes` over `shell`; their events arrive on `events` as [`Event::Child`].
    pub(super) fn start(
        ferry: &str,
        shell: &[String],
        words: bool,
        nodes: Vec<ChildNode>,
        events: &Sender<Event>,
    ) -> Result<Children, String> {
        let settings = crate::settings::Settings::from_env().map_err(|e| e.to_string())?;
        let state = nodes
            .iter()
            .map(|n| Child {
                ranks: n.spec.ranks.clone(),
                exited: 0,
                fenced: false,
                closed: false,
                heard: false,
            })
            .collect();
        let form = match words {
            true => CommandForm::Words,
            false => CommandForm::Quoted,
        };
        let mut started = Nodes::start_children(std::path::Path::new(ferry), shell, form, nodes)
            .map_err(|e| e.to_string())?;
        let receiver = started.take_events();
        let events = events.clone();
        std::thread::Builder::new()
            .name("ferry-node-children".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                for (index, event) in receiver {
                    if events.send(Event::Child(index, event)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok(Children {
            nodes: started,
            started: std::time::Instant::now(),
            connect_timeout: settings.connect_timeout,
            state,
        })
    }

    /// The child whose ranks include `rank`.
    pub(super) fn of_rank(&self, rank: u32) -> Option<usize> {
        self.state.iter().position(|c| c.ranks.contains(&rank))
    }

    /// Sends `message` to child `index`.
    pub(super) fn send(&mut self, index: usize, message: &NodeMessage) {
        self.nodes.send(index, message);
    }

    /// Sends `message` to every child still there.
    pub(super) fn send_all(&mut self, message: &NodeMessage) {
        self.nodes.send_all(message);
    }

    /// Whether every child is in the current fence (children that are gone do not hold it up:
    /// their loss ends the job anyway).
    pub(super) fn all_fenced(&self) -> bool {
        self.state.iter().all(|c| c.fenced || c.closed)
    }

    /// Starts the next fence.
    pub(super) fn clear_fence(&mut self) {
        self.state.iter_mut().for_each(|c| c.fenced = false);
    }

    /// Whether every child's output has ended.
    pub(super) fn all_closed(&self) -> bool {
        self.state.iter().all(|c| c.closed)
    }

    /// A child that has said nothing within the connect timeout, reported once.
    pub(super) fn silent(&mut self) -> Option<NodeMessage> {
        let limit = self.connect_timeout;
        if self.started.elapsed() < limit {
            return None;
        }
        let child = self.state.iter_mut().find(|c| !c.heard && !c.closed)?;
        child.heard = true;
        Some(NodeMessage::Failed {
            rank: child.ranks.first().copied(),
            message: format!(
                "its node daemon did not answer within {} s (FERRY_CONNECT_TIMEOUT)",
                limit.as_secs()
            ),
        })
    }

    /// Takes event `event` of child `index`: returns what goes up to the launcher, if anything.
    pub(super) fn on_event(&mut self, index: usize, event: NodeEvent) -> Option<NodeMessage> {
        let child = self.state.get_mut(index)?;
        child.heard = true;
        match event {
            NodeEvent::Message(NodeMessage::Fence) => {
                child.fenced = true;
                None
            }
            NodeEvent::Message(message) => {
                if matches!(message, NodeMessage::Exited { .. }) {
                    child.exited += 1;
                }
                Some(message)
            }
            NodeEvent::Closed(why) => {
                child.closed = true;
                self.nodes.links[index].closed = true;
                (child.exited < child.ranks.len()).then(|| NodeMessage::Failed {
                    rank: child.ranks.first().copied(),
                    message: format!("its node daemon ended ({why}) while its ranks ran"),
                })
            }
        }
    }
}
