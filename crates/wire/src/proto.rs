//! Types generated from `proto/PulsarApi.proto` and `proto/PulsarMarkers.proto`.

include!(concat!(env!("OUT_DIR"), "/pulsar.proto.rs"));

pub mod markers {
    //! Marker entries (`MessageMetadata.marker_type`).
    include!(concat!(env!("OUT_DIR"), "/pulsar.markers.rs"));
}
