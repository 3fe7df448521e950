-- The Telescope / fzf-lua / snacks backends, driven through stand-in modules (tests/nvim/stubs).
-- Env: NVIMTEST_ROOT (a directory holding a.md with at least 6 lines), NVIMTEST_STUBS.
local T = SaiplingTest
T.run(function()
  local root = assert(os.getenv("NVIMTEST_ROOT"))
  vim.opt.runtimepath:append(assert(os.getenv("NVIMTEST_STUBS")))
  local picker = require("saipling.picker")
  local results = {
    { filePath = "a.md", sectionHeading = "## Second", startLine = 5, endLine = 6, score = 0.875 },
  }
  T.result.auto = picker.resolve("auto")
  T.result.runs = {}
  for _, name in ipairs({ "telescope", "fzf-lua", "snacks" }) do
    vim.cmd("enew")
    require("saipling").setup({ picker = name, cmd = { "saipling-not-installed-anywhere" } })
    picker.pick(results, { title = "Saipling: " .. name, root = root })
    T.result.runs[name] = T.position()
  end
  T.result.calls = require("stub_log").calls
end)
