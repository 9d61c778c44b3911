//! Wire formats: ship a sketch to DataDog, an OpenTelemetry collector or
//! Prometheus, and read DataDog sketches back — into caller buffers, without
//! allocation.
//!
//! * DataDog's `ddsketch.proto` ([`encode_ddsketch`], [`decode_ddsketch`],
//!   [`decode_ddsketch_into`]): what sketches-go, sketches-java,
//!   sketches-py and the Datadog agent exchange. Producers disagree on what
//!   the mapping's `gamma` and the keys mean: decoding takes the producer's
//!   [`Convention`].
//! * OpenTelemetry's exponential histogram: a sketch over an
//!   [`ExponentialMapping`](crate::mapping::ExponentialMapping) *is* one,
//!   bucket for bucket; [`ExponentialHistogram`] reads it as a data point,
//!   and [`encode_otlp_data_point`] / [`encode_otlp_metrics_request`] write
//!   OTLP protobuf (the latter is an `ExportMetricsServiceRequest`, the body
//!   of an OTLP/HTTP `POST /v1/metrics`). Prometheus ingests the same data
//!   through its OTLP receiver as native histograms, when the points are
//!   [`Cumulative`](Temporality::Cumulative) (it drops delta histograms
//!   unless converted first).
//!
//! Every encoder says how long its output is before writing it (an exact
//! `*_len` function, and a `const fn` bound where the length depends only on
//! the sketch's type), and fails with a `BufferTooSmall` error, writing
//! nothing, when the buffer is shorter. Decoders never panic, never read
//! past their input, and name what was wrong in a [`DecodeError`].

mod convention;
mod ddsketch;
mod error;
mod otel;
mod otlp;
mod protobuf;

pub use convention::{Convention, WireMapping, MAX_PYTHON_DRIFT};
pub use ddsketch::{
    ddsketch_encoded_len, ddsketch_max_encoded_len, decode_ddsketch, decode_ddsketch_into,
    encode_ddsketch, DecodeReport,
};
pub use error::{DecodeError, EncodeError};
pub use otel::{Buckets, ExponentialHistogram};
pub use otlp::{
    encode_otlp_data_point, encode_otlp_metrics_request, otlp_data_point_len,
    otlp_data_point_max_len, otlp_metrics_request_len, OtlpMetric, OtlpPoint, Temporality,
};
