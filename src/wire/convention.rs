//! Producer conventions of DataDog's protobuf format: what the γ on the wire
//! means and which bucket a key names.

use crate::mapping::{
    ExponentialMapping, IndexMapping, LogApproximation, LogLikeMapping, LogLinearMapping,
    MappingError,
};

/// Whose conventions a DataDog `ddsketch.proto` message follows.
///
/// The format carries `gamma`, `indexOffset`, the interpolation and bucket
/// keys, but producers disagree on what the first and the last mean:
///
/// | | keys | `gamma` written |
/// |---|---|---|
/// | [`GoJava`](Self::GoJava): sketches-go, sketches-java, libdd-ddsketch, this crate | `floor(log(v)·m + offset)` | the mapping's own γ: `2^(1/m)` for linear and cubic interpolation, `(1+α)/(1−α)` for none |
/// | [`Python`](Self::Python): sketches-py, sketches-js | `ceil(log(v)·m) + offset`, so Go's key plus one | `(1+α)/(1−α)` for every interpolation |
///
/// (`m` is the multiplier: keys per unit of the approximated logarithm.)
/// Both agree for the exact logarithm (interpolation `NONE`) on `gamma` but
/// not on keys. Decoding with the wrong convention shifts every quantile by
/// one bucket (about 2α) and, for interpolated mappings, rescales them: the
/// bytes cannot tell, so the caller says. This crate's keys are Go's: a
/// bucket is `[lower, lower·γ)`, and a Python key `k` is decoded as `k − 1`,
/// which is the same bucket except for values exactly on a boundary (Python
/// buckets are upper-inclusive), whose representative then stays within α.
///
/// # A round trip through `Python` changes the mapping
/// For [`LogarithmicMapping`](crate::mapping::LogarithmicMapping),
/// [`CubicMapping`](crate::mapping::CubicMapping) and
/// [`LinearMapping`](crate::mapping::LinearMapping), Python bytes carry the
/// textbook `(1+α)/(1−α)`, a hair wider than the mapping's own γ (which
/// is narrower by a rounding margin, see [`crate::mapping`]), so that
/// sketches-py merges them with its own. Decoded, the
/// bucket keys and counts are unchanged, but the mapping is the one of the
/// wider γ: not equal to the original (α = 0.01 reads back as
/// 0.010000000017683, and each further round trip widens it again), and
/// its bounds drift from the original's by that margin per key away from
/// key 0 (a relative 2·10⁻⁷ at key 5 750 for α = 1 %). So the decoded
/// sketch does not [`merge`](crate::DDSketch::merge) with sketches of the
/// original configuration, and
/// [`decode_ddsketch_into`](super::decode_ddsketch_into) into one returns
/// [`MappingMismatch`](super::DecodeError::MappingMismatch). Instead,
/// decode into a fresh sketch of the decoded mapping (its
/// [`decode_ddsketch`](super::decode_ddsketch) result, or
/// `DDSketch::with_mapping(*decoded.mapping())`) and merge Python bytes of
/// the same origin into that; between tailguard peers use `GoJava`, whose
/// bytes carry the mapping's own γ and decode to an equal mapping.
/// [`LogLinearMapping`] and [`ExponentialMapping`] come back equal in
/// either convention.
///
/// Where the textbook γ is written, the keys of the bytes were made with
/// the narrower one: a sketch decoded from them answers within `1.02 α`
/// (see [`MAX_PYTHON_DRIFT`](super::MAX_PYTHON_DRIFT)), while its mapping's
/// `relative_accuracy()` states the α of the γ it read. Seen: 1.0049·10⁻³
/// at α = 10⁻³, near the bottom of the range, where the drift is largest.
/// At α = 1 % and coarser the drift is a few ulps.
///
/// The margin is of fixed size, so the drift grows as α shrinks: where it
/// would pass [`MAX_PYTHON_DRIFT`](super::MAX_PYTHON_DRIFT) of a bucket
/// anywhere in the range (α below about 10⁻³; 8·10⁻⁴ is the first the
/// linear mapping switches at, 6·10⁻⁴ the others), the bytes carry the
/// mapping's own γ instead (see [`WireMapping::wire_gamma`]): every
/// quantile read back, by this crate or by sketches-py, stays within α,
/// a [`LogarithmicMapping`](crate::mapping::LogarithmicMapping) comes back
/// equal, and sketches-py refuses to merge them with its own sketches of
/// that α (their buckets differ).
///
/// ```
/// use tailguard::wire::{decode_ddsketch, decode_ddsketch_into, encode_ddsketch, Convention, DecodeError};
/// use tailguard::DDSketch;
///
/// let mut sketch = DDSketch::new(0.01)?;
/// sketch.add(42.0)?;
/// let mut buffer = [0u8; 64];
/// let n = encode_ddsketch(&sketch, Convention::Python, &mut buffer)?;
/// let (back, _): (DDSketch, _) = decode_ddsketch(&buffer[..n], Convention::Python)?;
/// assert_ne!(back.mapping(), sketch.mapping());
/// let mut local = DDSketch::new(0.01)?;
/// assert_eq!(
///     decode_ddsketch_into(&mut local, &buffer[..n], Convention::Python),
///     Err(DecodeError::MappingMismatch)
/// );
/// // Into a sketch of the decoded mapping, it merges.
/// let mut same: DDSketch = DDSketch::with_mapping(*back.mapping());
/// decode_ddsketch_into(&mut same, &buffer[..n], Convention::Python)?;
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// ```
/// use tailguard::wire::Convention;
/// assert_eq!(Convention::default(), Convention::GoJava);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Convention {
    /// DataDog's Go and Java libraries (sketches-go, sketches-java), the
    /// Datadog agent's Rust `libdd-ddsketch`, and this crate.
    #[default]
    GoJava,
    /// DataDog's Python and JavaScript libraries (sketches-py, sketches-js).
    Python,
}

impl Convention {
    /// What to add to a key of this convention to get this crate's key.
    pub(crate) const fn key_shift(self) -> i64 {
        match self {
            Self::GoJava => 0,
            Self::Python => -1,
        }
    }
}

/// A mapping that DataDog's protobuf format can carry: built from the
/// wire's `gamma` and `indexOffset`, and written back as them.
///
/// Implemented by the log-like mappings ([`LogarithmicMapping`](crate::mapping::LogarithmicMapping),
/// [`CubicMapping`](crate::mapping::CubicMapping),
/// [`LinearMapping`](crate::mapping::LinearMapping)), by
/// [`LogLinearMapping`] (a LINEAR mapping whose multiplier is a power of
/// two), and by [`ExponentialMapping`], which travels as an exact-logarithm
/// mapping whose γ is its base.
pub trait WireMapping: IndexMapping {
    /// The mapping that a message of `convention` describes.
    ///
    /// # Errors
    /// [`MappingError::InvalidGamma`] or
    /// [`MappingError::InvalidIndexOffset`] when no mapping of this type has
    /// these parameters.
    fn from_wire(
        gamma: f64,
        index_offset: f64,
        convention: Convention,
    ) -> Result<Self, MappingError>;

    /// The `gamma` a producer of `convention` writes for this mapping.
    fn wire_gamma(&self, convention: Convention) -> f64;
}

impl<L: LogApproximation> WireMapping for LogLikeMapping<L> {
    /// For [`Convention::Python`], `gamma` is `(1+α)/(1−α)`; the mapping's
    /// own γ is `gamma^(1/c)` with `c` the approximation's
    /// [`CORRECTING_FACTOR`](LogApproximation::CORRECTING_FACTOR) (so that
    /// `with_gamma` recovers the same α), and exactly `gamma` for the
    /// natural logarithm.
    fn from_wire(
        gamma: f64,
        index_offset: f64,
        convention: Convention,
    ) -> Result<Self, MappingError> {
        let own = match convention {
            Convention::GoJava => gamma,
            Convention::Python => {
                if !(gamma > 1.0 && gamma.is_finite()) {
                    return Err(MappingError::InvalidGamma(gamma));
                }
                if L::CORRECTING_FACTOR == 1.0 {
                    gamma
                } else {
                    libm::exp(libm::log(gamma) / L::CORRECTING_FACTOR)
                }
            }
        };
        Self::with_gamma(own, index_offset)
    }

    /// For [`Convention::Python`]: the textbook `(1+α)/(1−α)` (what
    /// sketches-py and sketches-js write for their own sketches of that α,
    /// so that they merge ours) while the keys a reader of it finds are the
    /// buckets they name here, to within [`MAX_PYTHON_DRIFT`] of a bucket
    /// at either end of the indexable range; otherwise (α below about
    /// 10⁻³) the mapping's own γ raised to the correcting factor, which
    /// names every bucket exactly (Python then refuses to merge it with
    /// its own sketches: their buckets are not the same).
    fn wire_gamma(&self, convention: Convention) -> f64 {
        match convention {
            Convention::GoJava => self.gamma(),
            Convention::Python => {
                let a = self.relative_accuracy();
                let textbook = (1.0 + a) / (1.0 - a);
                let ln_own = libm::log(self.gamma());
                // The own γ a reader rebuilds from the textbook one.
                let ln_read = libm::log(textbook) / L::CORRECTING_FACTOR;
                let offset = self.index_offset();
                // Keys from the offset, where a misread γ misplaces most.
                let reach = [self.min_indexable_value(), self.max_indexable_value()]
                    .map(|v| (f64::from(self.index(v)) - offset).abs());
                let drift = reach[0].max(reach[1]) * (ln_read - ln_own).abs() / ln_own;
                if drift <= MAX_PYTHON_DRIFT {
                    textbook
                } else if L::CORRECTING_FACTOR == 1.0 {
                    self.gamma()
                } else {
                    libm::exp(ln_own * L::CORRECTING_FACTOR)
                }
            }
        }
    }
}

/// How far, in buckets, Python bytes of a log-like mapping may misplace a
/// key by carrying the textbook γ (see [`WireMapping::wire_gamma`]): a
/// hundredth of a bucket moves a quantile by at most a fiftieth of α, so a
/// sketch decoded from them answers within `1.02 α`. The logarithmic
/// mapping's textbook γ drifts by 6·10⁻⁵ of a bucket over the whole range
/// at α = 1 %, 0.006 at 10⁻³ (both written), 0.07 at 3·10⁻⁴ and 62 at
/// 10⁻⁵ (the own γ written).
pub const MAX_PYTHON_DRIFT: f64 = 1e-2;

impl WireMapping for ExponentialMapping {
    /// Accepts the γ of a scale in
    /// [`MIN_SCALE`](ExponentialMapping::MIN_SCALE)`..=`[`MAX_SCALE`](ExponentialMapping::MAX_SCALE)
    /// (within 10⁻⁹ of its logarithm) and index offset 0, under either
    /// convention: both write the base itself for the exact logarithm.
    fn from_wire(
        gamma: f64,
        index_offset: f64,
        _convention: Convention,
    ) -> Result<Self, MappingError> {
        if index_offset != 0.0 {
            return Err(MappingError::InvalidIndexOffset(index_offset));
        }
        ExponentialMapping::with_base(gamma).ok_or(MappingError::InvalidGamma(gamma))
    }

    fn wire_gamma(&self, _convention: Convention) -> f64 {
        self.gamma()
    }
}

impl WireMapping for LogLinearMapping {
    /// A LINEAR mapping whose multiplier `m` (keys per unit of `log2`) is
    /// `2^k`: Go and Java write `γ = 2^(1/m)`, Python and JavaScript
    /// `(1+α)/(1−α)` with their multiplier `1/ln(γ)`, so `γ = e^(1/m)`.
    /// Either is recognised to within 10⁻⁹ of its logarithm; the index
    /// offset must be an integer (a fractional one moves the bucket
    /// boundaries off the mantissa bits: decode such a message as
    /// [`LinearMapping`](crate::mapping::LinearMapping)).
    ///
    /// This crate rebuilds the mapping exactly from either γ. A reader
    /// that computes the multiplier from the rounded γ, as Go and Java do,
    /// gets `2^k` within a relative `2^(k−53) / ln 2` (7·10⁻¹³ at `k = 12`,
    /// 2·10⁻⁹ at `k = 23`): the precision the format's `double` γ allows
    /// any mapping that fine.
    fn from_wire(
        gamma: f64,
        index_offset: f64,
        convention: Convention,
    ) -> Result<Self, MappingError> {
        if !(gamma > 1.0 && gamma.is_finite()) {
            return Err(MappingError::InvalidGamma(gamma));
        }
        // `1/m`, from either convention's γ.
        let step = match convention {
            Convention::GoJava => libm::log2(gamma),
            Convention::Python => libm::log(gamma),
        };
        Self::with_multiplier(step, gamma, index_offset)
    }

    fn wire_gamma(&self, convention: Convention) -> f64 {
        match convention {
            Convention::GoJava => self.gamma(),
            Convention::Python => libm::exp(self.step()),
        }
    }
}
