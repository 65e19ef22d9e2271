-- Long identifiers in a table's cells, test names above all, may break after an underscore
-- or a dot in HTML: a phone's narrow column then wraps `test_a_paused_run_resumes_only_once`
-- between its words instead of cutting it at whatever letter reaches the edge. A <wbr> is
-- an allowed break, not a character, so a name copied from the page is the name in the code.
-- Only in HTML (the PDF is printed from it); the EPUB's XHTML keeps Pandoc's own <code>.

local function escape(text)
  return (text:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

local function breakable(code)
  if not code.text:find("[_.]") then
    return nil
  end
  local broken = escape(code.text):gsub("[_.]", "%0<wbr>")
  return pandoc.RawInline("html", "<code>" .. broken .. "</code>")
end

function Table(table)
  if FORMAT ~= "html" then
    return nil
  end
  return table:walk({ Code = breakable })
end
