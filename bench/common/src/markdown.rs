//! Markdown tables: a header, its alignment row, and rows of cells.

/// A Markdown table being written.
pub struct Table {
    text: String,
    columns: usize,
}

impl Table {
    /// A table with these column headers; a header starting with `>` is right-aligned (the
    /// `>` is not shown), as numbers are.
    pub fn new(headers: &[&str]) -> Table {
        let names: Vec<&str> = headers.iter().map(|h| h.strip_prefix('>').unwrap_or(h)).collect();
        let aligns: Vec<&str> =
            headers.iter().map(|h| if h.starts_with('>') { "---:" } else { "---" }).collect();
        Table { text: format!("| {} |\n|{}|\n", names.join(" | "), aligns.join("|")), columns: headers.len() }
    }

    /// Adds a row (as many cells as columns).
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) -> &mut Table {
        debug_assert_eq!(cells.len(), self.columns, "a row of the table's width");
        let cells: Vec<&str> = cells.iter().map(|c| c.as_ref()).collect();
        self.text.push_str(&format!("| {} |\n", cells.join(" | ")));
        self
    }

    /// The table's text.
    pub fn render(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_right_aligned_and_rows_follow_the_header() {
        let mut t = Table::new(&["scenario", ">p50 µs"]);
        t.row(&["one", "12"]);
        assert_eq!(t.render(), "| scenario | p50 µs |\n|---|---:|\n| one | 12 |\n");
    }
}
