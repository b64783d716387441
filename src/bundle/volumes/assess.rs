//! The damage assessment: [`assess`] says, from the problems the checks at rest found, which
//! units are lost and whether parity can rebuild them ([`Repairability`]).

use super::at_rest::*;
use super::source::*;
use super::units::*;
use crate::bundle::open::BundleDir;
use crate::parity::Shard;

/// How the damage found compares with the parity budget (FORMAT.md section 17.3).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Repairability {
    /// Whether every stripe has at most `R` erased units.
    pub repairable: bool,
    /// Erased data units (chunks of data volumes).
    pub erased_data_units: u64,
    /// Erased recovery units (chunks of parity volumes).
    pub erased_recovery_units: u64,
    /// Stripes with at least one erased unit, of `stripes`.
    pub damaged_stripes: u64,
    /// Stripes in the bundle.
    pub stripes: u64,
    /// Erased units in the worst stripe.
    pub worst_stripe_erased: u32,
    /// Recovery units per stripe (`R`).
    pub recovery_per_stripe: u32,
    /// Recovery units left in the worst stripe (`R` minus its erased units, at least 0).
    pub parity_left_in_worst_stripe: u32,
    /// Data volumes with damage that cannot be rebuilt (to copy again), when not repairable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copy_again: Vec<String>,
}

impl Repairability {
    /// One sentence for the operator: how much is damaged, how much parity is left, and
    /// whether it can be rebuilt.
    pub fn describe(&self) -> String {
        let what = format!(
            "{} damaged data chunk(s) and {} damaged parity chunk(s) in {} of {} parity stripes; the worst stripe lost {} unit(s) of the {} its parity can rebuild",
            self.erased_data_units,
            self.erased_recovery_units,
            self.damaged_stripes,
            self.stripes,
            self.worst_stripe_erased,
            self.recovery_per_stripe
        );
        if self.repairable {
            format!(
                "REPAIRABLE from parity: {what} ({} left); `airlock unpack` installs it as it is, `airlock repair` fixes the bundle",
                self.parity_left_in_worst_stripe
            )
        } else {
            format!("NOT repairable from parity: {what}")
        }
    }
}

/// Assesses a bundle with parity whose volumes were checked: `data` and `parity` are the
/// problems [`check_volumes`] and [`check_parity_volumes`] found. Units of volumes without
/// problems are intact; the units of damaged volumes are read and hashed one by one.
pub fn assess(
    opened: &BundleDir,
    data: &[VolumeProblem],
    parity: &[VolumeProblem],
) -> Option<Repairability> {
    let source = DirVolumes::of(opened, &crate::progress::Silent);
    let ur = UnitReader::new(&opened.manifest, &source)?;
    Some(assess_with(&ur, data, parity))
}

/// [`assess`] with a given unit reader (whose remembered states are reused by a repair).
pub fn assess_with(
    ur: &UnitReader<'_>,
    data: &[VolumeProblem],
    parity: &[VolumeProblem],
) -> Repairability {
    let m = ur.m;
    let g = ur.g;
    let mut erased: Vec<(u64, Shard)> = Vec::new();
    let mut erased_data = 0;
    let mut erased_recovery = 0;
    let mut lost_units_of: std::collections::BTreeMap<u64, usize> = Default::default();
    for p in data {
        let i = p.index;
        for c in 0..m.volumes[i].chunks.len() {
            let u = ur.layout.unit_of_chunk(i, c);
            if !ur.intact(false, u) {
                let (k, d) = g.locate(u);
                erased.push((k, Shard::Data(d)));
                lost_units_of.insert(u, i);
                erased_data += 1;
            }
        }
    }
    for p in parity {
        let j = p.index;
        for c in 0..ur.parity_volumes()[j].chunks.len() {
            let n = ur.layout.recovery_of_chunk(j, c);
            if !ur.intact(true, n) {
                let r = (n % u64::from(g.recovery)) as u32;
                erased.push((n / u64::from(g.recovery), Shard::Recovery(r)));
                erased_recovery += 1;
            }
        }
    }
    let a = g.assess(&erased);
    let mut per_stripe: std::collections::BTreeMap<u64, u32> = Default::default();
    for (k, _) in &erased {
        *per_stripe.entry(*k).or_default() += 1;
    }
    let mut copy_again: Vec<String> = lost_units_of
        .iter()
        .filter(|(u, _)| per_stripe[&g.locate(**u).0] > g.recovery)
        .map(|(_, i)| m.volumes[*i].name.clone())
        .collect();
    copy_again.dedup();
    Repairability {
        repairable: a.repairable,
        erased_data_units: erased_data,
        erased_recovery_units: erased_recovery,
        damaged_stripes: a.damaged_stripes,
        stripes: g.stripes(),
        worst_stripe_erased: a.worst_stripe_erased,
        recovery_per_stripe: g.recovery,
        parity_left_in_worst_stripe: g.recovery.saturating_sub(a.worst_stripe_erased),
        copy_again,
    }
}
