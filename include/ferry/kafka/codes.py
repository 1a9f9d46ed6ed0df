"""Which librdkafka error codes name a state that passes by itself, and which are never
retried: one list for the retry loop (`retry`) and for the errors it raises (`errors`)."""

from __future__ import annotations

from confluent_kafka import KafkaError

TRANSIENT_CODES: frozenset[int] = frozenset({
    # a group or transaction coordinator loading its state, moving, or not elected yet
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError._WAIT_COORD,
    # a partition leader moving or not elected yet (or its epoch not yet known to the
    # broker asked, or newer than the client's metadata), a replica catching up
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    # a leader just elected whose high watermark has not caught up yet answers ListOffsets
    # with this (KIP-207), and a replica's failed log dir moves its leaders elsewhere
    KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.KAFKA_STORAGE_ERROR,
    # the network, or a broker that is down or restarting
    KafkaError.NETWORK_EXCEPTION, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE,
    KafkaError._RESOLVE,
    # a broker that left the cluster's metadata (stopped, or restarted at a new address)
    # while a request waited on its connection: the request fails, the next one goes to
    # whichever broker now leads
    KafkaError._DESTROY_BROKER, KafkaError._NODE_UPDATE,
    # a transaction still being completed (stable offsets, a concurrent commit)
    KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.CONCURRENT_TRANSACTIONS,
    # a controller quota on topic and partition changes (KIP-599): passes with time
    KafkaError.THROTTLING_QUOTA_EXCEEDED,
})
"""Codes of states that pass by themselves. UNKNOWN_TOPIC_OR_PART is not among them: a
missing topic is usually an error to report at once (a wrong name, a deleted topic);
callers that have just created the topic pass it in `also`, since metadata takes a moment
to reach every broker."""

NEVER_CODES: frozenset[int] = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.DELEGATION_TOKEN_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._FATAL, KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
})
"""Codes never retried, whatever their text or flags say: access is denied, a login or TLS
handshake failed, or the client was fenced (a newer producer owns the transactional id)."""
