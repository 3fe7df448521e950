-- The picker without a server: fake results through vim.ui.select, jump to file:line.
-- Env: NVIMTEST_ROOT (a directory holding a.md with at least 6 lines).
local T = SaiplingTest
T.run(function()
  local root = assert(os.getenv("NVIMTEST_ROOT"))
  require("saipling").setup({ cmd = { "saipling-not-installed-anywhere" } })
  local picker = require("saipling.picker")
  T.result.resolved = picker.resolve("auto")
  local results = {
    { filePath = "a.md", uri = vim.uri_from_fname(root .. "/a.md"), sectionHeading = "## Second",
      startLine = 5, endLine = 6, score = 0.875, preview = "The   second **section's** text." },
    { filePath = "b.md", sectionHeading = vim.NIL, headingPath = { "Top", "Inner" }, startLine = 2, score = 0.5 },
    { filePath = root .. "/a.md", range = { start = { line = 2, character = 0 } } },
    { filePath = "c.md", sectionHeading = vim.NIL, headingPath = "Top > Middle > Leaf", startLine = 1, score = 1 },
  }
  T.result.formatted = {}
  for i, item in ipairs(results) do
    T.result.formatted[i] = picker.format(item, root)
  end
  local _, range_line = picker.location(results[3], root)
  T.result.range_line = range_line
  T.auto_select()
  picker.pick(results, { title = "Saipling: fake", root = root })
  T.result.position = T.position()
  -- Every row under the confidence bar: the rows are marked and the title and a notification say so.
  local low = {
    { filePath = "a.md", sectionHeading = "Second", startLine = 5, endLine = 6, score = 0.31, preview = "x" },
    { filePath = "b.md", sectionHeading = "Inner", startLine = 2, score = 0.05 },
  }
  picker.pick(low, { title = "Saipling: vague", root = root })
  T.result.low_prompt, T.result.low_items = T.result.select_prompt, T.result.select_items
  T.result.low_formatted = picker.format(low[1], root)
  -- :SaiplingStatus says when the last run finished, not when it last read a file
  local lines = require("saipling").format_status({
    lastIndexed = "2026-11-28T09:59:00+00:00",
    lastRun = { finished = "2026-11-28T10:04:00+00:00", seconds = 300 },
  })
  T.result.status_indexed = lines[3]
  -- the row shows the text around the matched words, not the passage's opening words
  T.result.snippet_first = picker.snippet({ preview = "Opening words.", snippet = "… where the **lanterns** drift" })
  -- a result's own confidence decides, not its score (relative to the best result's)
  T.result.own_strong = picker.format({ filePath = "s.md", score = 0.39, confidence = 0.9 }, root)
  T.result.own_weak = picker.format({ filePath = "w.md", score = 0.8, confidence = 0.2 }, root)
  -- the server's noConfidentMatch decides when given, even over scores that look fine
  picker.pick({ results[1] }, { title = "Saipling: told", root = root, no_confident_match = true })
  T.result.told_prompt = T.result.select_prompt
  picker.pick({ results[1] }, { title = "Saipling: confident", root = root })
  T.result.confident_prompt = T.result.select_prompt
  -- Commands without a running server notify instead of raising.
  vim.cmd("enew")
  vim.cmd("SaiplingStatus")
  vim.cmd("SaiplingSearch anything")
  picker.pick({}, {})
end)
