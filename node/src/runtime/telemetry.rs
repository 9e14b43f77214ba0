//! The signed progress reports both round loops gossip for dashboards: the
//! loop fills in what it knows; `publish` adds the node's links and refusals
//! (asked of the network on a task, so the loop never waits), signs and
//! gossips it.

use murmur_protocol::telemetry::{MAX_LINKS, MAX_REASON_BYTES, MAX_REJECTION_KINDS};
use murmur_protocol::{NodeKey, PeerLink, RejectionCount, Telemetry};

use crate::net::{public_key_of, NetHandle, TopicKind};

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Fill in `t`'s links and rejections, sign it with `key` and gossip it.
pub fn publish(net: NetHandle, key: NodeKey, mut t: Telemetry) {
    tokio::spawn(async move {
        t.links = net
            .peers()
            .await
            .into_iter()
            .filter(|p| p.role.is_some())
            .filter_map(|p| public_key_of(&p.peer).map(|k| PeerLink { peer: k, relayed: p.relayed }))
            .take(MAX_LINKS)
            .collect();
        t.rejections = net
            .rejections()
            .await
            .into_iter()
            .take(MAX_REJECTION_KINDS)
            .map(|(reason, count)| RejectionCount { reason: truncate_utf8(&reason, MAX_REASON_BYTES), count })
            .collect();
        let bytes = t.sign(&key).encode();
        if let Err(e) = net.publish(TopicKind::Telemetry, bytes).await {
            tracing::debug!("publishing telemetry: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("abc", 10), "abc");
    }
}
