//! Drawing the damage map (issue 25 item 13) for a terminal: one row per volume, one cell per
//! unit (or per few units, the worst of them, to fit the width), and a one-line legend. Where
//! it cannot fit (a narrow terminal) there is no map and the list of damaged volumes stays the
//! whole report; pipes and `--json` never get a map.

use airlock::bundle::damage::{DamageMap, UnitState};
use airlock::display::human;

/// Below this many columns there is no map.
const MIN_WIDTH: usize = 40;

/// Fewer cells a row than this would hide too much: no map.
const MIN_CELLS: usize = 16;

/// With more rows than this, runs of three or more intact volumes are drawn as one line.
const MAX_ROWS: usize = 48;

/// The width to draw for when the terminal does not say (a serial console reports 0 rows and
/// 0 columns) and `COLUMNS` does not either: the classic terminal's.
const DEFAULT_WIDTH: usize = 80;

/// The width of `term` for the map: `None` when it is not a terminal (a pipe, a file: the list
/// alone), else what it reports, else `COLUMNS`, else [`DEFAULT_WIDTH`] (issue 33 item 7: a
/// terminal that reports a size of 0 lost the map).
pub fn terminal_width(term: &console::Term) -> Option<usize> {
    if !term.is_term() {
        return None;
    }
    if let Some((_, cols)) = term.size_checked() {
        return Some(usize::from(cols));
    }
    Some(
        std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.trim().parse::<usize>().ok())
            .filter(|&c| c > 0)
            .unwrap_or(DEFAULT_WIDTH),
    )
}

/// The cell of a state (ASCII, for any terminal) and its legend text.
fn cell(s: UnitState) -> (char, &'static str) {
    match s {
        UnitState::Intact => ('.', "intact"),
        UnitState::FromCopy => ('c', "in another copy"),
        UnitState::Rebuildable => ('r', "rebuildable"),
        UnitState::Damaged => ('D', "damaged"),
        UnitState::BeyondRepair => ('X', "beyond repair"),
    }
}

/// The map's lines for a terminal `width` columns wide, or `None` when it does not fit.
pub fn draw(map: &DamageMap, width: usize) -> Option<Vec<String>> {
    let name_w = map.rows.iter().map(|r| r.name.len()).max()?;
    let units = map.rows.iter().map(|r| r.units.len()).max()?.max(1);
    // Two spaces, the name, two spaces, the cells, and the last column left free (a line that
    // fills it wraps on some terminals).
    let avail = width.checked_sub(name_w + 5)?;
    if width < MIN_WIDTH || avail < MIN_CELLS {
        return None;
    }
    let per_cell = units.div_ceil(avail);
    let mut present: Vec<UnitState> = map.rows.iter().flat_map(|r| r.units.clone()).collect();
    present.push(UnitState::Intact);
    present.sort();
    present.dedup();
    let legend = present
        .iter()
        .map(|s| {
            let (c, text) = cell(*s);
            format!("{c} {text}")
        })
        .collect::<Vec<_>>()
        .join("  ");
    let legend = format!("  {legend}");
    if legend.len() >= width {
        return None;
    }
    let header = if per_cell == 1 {
        format!("damage map, one cell per unit of {}:", human(map.unit_size))
    } else {
        format!(
            "damage map, one cell per {per_cell} units of {} (the worst shown):",
            human(map.unit_size)
        )
    };
    let mut lines = vec![if header.len() < width {
        header
    } else {
        "damage map:".to_string()
    }];
    let row_line = |r: &airlock::bundle::damage::VolumeRow| {
        let cells: String = r
            .units
            .chunks(per_cell)
            .map(|c| cell(*c.iter().max().expect("a chunk is not empty")).0)
            .collect();
        format!("  {:<name_w$}  {cells}", r.name)
    };
    let mut i = 0;
    while i < map.rows.len() {
        let run = map.rows[i..]
            .iter()
            .take_while(|r| r.intact() && r.parity == map.rows[i].parity)
            .count();
        if map.rows.len() > MAX_ROWS && run >= 3 {
            lines.push(format!(
                "  {} .. {}  intact ({run} volumes)",
                map.rows[i].name,
                map.rows[i + run - 1].name
            ));
            i += run;
        } else {
            lines.push(row_line(&map.rows[i]));
            i += 1;
        }
    }
    lines.push(legend);
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock::bundle::damage::VolumeRow;

    fn map(rows: usize, units: usize) -> DamageMap {
        DamageMap {
            unit_size: 1 << 20,
            rows: (0..rows)
                .map(|i| VolumeRow {
                    name: format!("data.{i:03}"),
                    parity: false,
                    units: vec![UnitState::Intact; units],
                })
                .collect(),
        }
    }

    #[test]
    fn one_row_per_volume_one_cell_per_unit_and_a_legend() {
        let mut m = map(3, 8);
        m.rows[1].units[2] = UnitState::Rebuildable;
        m.rows[2].units[7] = UnitState::BeyondRepair;
        let lines = draw(&m, 80).unwrap();
        assert_eq!(
            lines,
            [
                "damage map, one cell per unit of 1.0 MiB:",
                "  data.000  ........",
                "  data.001  ..r.....",
                "  data.002  .......X",
                "  . intact  r rebuildable  X beyond repair",
            ]
        );
    }

    #[test]
    fn a_cell_of_several_units_shows_the_worst_and_every_line_fits() {
        let mut m = map(2, 1000);
        m.rows[0].units[999] = UnitState::Damaged;
        m.rows[1].units[0] = UnitState::FromCopy;
        m.rows[1].units[1] = UnitState::Rebuildable;
        // The legend takes 55 columns here, and the last column stays free.
        assert!(draw(&m, 55).is_none());
        for width in [56, 60, 79, 80, 100, 200] {
            let lines = draw(&m, width).unwrap();
            for l in &lines {
                assert!(l.len() < width, "{width}: {l:?}");
            }
            assert!(lines[1].ends_with('D'), "{lines:?}");
            assert!(lines[2].trim_start_matches("  data.001  ").starts_with('r'));
        }
    }

    #[test]
    fn no_map_on_a_narrow_terminal() {
        assert!(draw(&map(2, 8), 39).is_none());
        assert!(draw(&map(2, 8), 20).is_none());
        assert!(draw(&map(2, 8), 0).is_none());
        assert!(draw(&map(0, 8), 80).is_none());
    }

    #[test]
    fn many_volumes_intact_runs_are_one_line() {
        let mut m = map(60, 4);
        m.rows[30].units[0] = UnitState::Rebuildable;
        let lines = draw(&m, 80).unwrap();
        assert_eq!(lines[1], "  data.000 .. data.029  intact (30 volumes)");
        assert_eq!(lines[2], "  data.030  r...");
        assert_eq!(lines[3], "  data.031 .. data.059  intact (29 volumes)");
        assert_eq!(lines.len(), 5);
    }
}
