-- A plain novel folder in a real headless Neovim against the real server: where the root lands, the filter
-- prefixes of :SaiplingSearch and their completion, the related window following the current file, and
-- :checkhealth with a running server.
-- Env: NVIMTEST_PYTHON, NVIMTEST_OPEN (file to open first), NVIMTEST_OTHER (file to switch to),
--      NVIMTEST_TIMEOUT_MS.
local T = SaiplingTest
local r = T.result

local function rows_of(buf)
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

T.run(function()
  local timeout = tonumber(os.getenv("NVIMTEST_TIMEOUT_MS")) or 60000
  local saipling = require("saipling")
  saipling.setup({
    cmd = { assert(os.getenv("NVIMTEST_PYTHON")), "-m", "saipling", "serve" },
    init_options = { provider = "none" },
  })
  r.cwd = vim.fn.getcwd()
  vim.cmd.edit(vim.fn.fnameescape(assert(os.getenv("NVIMTEST_OPEN"))))
  local found_root, how = saipling.find_root(vim.api.nvim_buf_get_name(0))
  r.find_root = { root = found_root, how = how }
  local client = T.wait_client(timeout)
  if not client then
    return
  end
  r.root_dir = client.root_dir
  r.status = T.wait_indexed(client, timeout)
  if not r.status or T.server_quit() then
    r.error = "the index did not become ready"
    return
  end
  -- Completion of :SaiplingSearch.
  r.complete = {
    prefixes = vim.fn.getcompletion("SaiplingSearch ty", "cmdline"),
    all = vim.fn.getcompletion("SaiplingSearch ", "cmdline"),
    type = vim.fn.getcompletion("SaiplingSearch upto:3 type:cha", "cmdline"),
    type_list = vim.fn.getcompletion("SaiplingSearch type:character,wor", "cmdline"),
    path = vim.fn.getcompletion("SaiplingSearch path:ch", "cmdline"),
    book = vim.fn.getcompletion("SaiplingSearch book:", "cmdline"),
  }

  -- Searches through vim.ui.select: the rows shown for each query (without jumping).
  local shown
  vim.ui.select = function(items, opts, on_choice)
    shown = { prompt = opts.prompt, items = {} }
    for i, item in ipairs(items) do
      shown.items[i] = opts.format_item(item)
    end
    on_choice(nil, nil)
  end
  local function search(args, bang)
    shown = nil
    local before = #r.notifications
    vim.cmd("SaiplingSearch" .. (bang and "! " or " ") .. args)
    vim.wait(20000, function()
      return shown ~= nil or #r.notifications > before
    end, 20)
    return shown or { notes = vim.list_slice(r.notifications, before + 1) }
  end
  if os.getenv("NVIMTEST_EXCLUDED") == "1" then -- (a folder whose .context_settings.json excludes drafts/)
    r.searches = {
      excluded = search("quillwort"), -- only in drafts/
      all_files = search("quillwort", true), -- :SaiplingSearch! reads excluded files too
      nowhere = search("path:nowhere/ sister"), -- a filter that leaves nothing says why
    }
    -- what :SaiplingStatus and :checkhealth say of the files kept out
    local before = #r.notifications
    vim.cmd("SaiplingStatus")
    vim.wait(10000, function()
      return #r.notifications > before
    end, 20)
    r.status_notes = vim.list_slice(r.notifications, before + 1)
    vim.cmd("checkhealth saipling")
    r.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    return
  end
  if os.getenv("NVIMTEST_QUICK") == "1" then
    return
  end

  r.searches = {
    plain = search("sister"),
    filtered = search("upto:12 type:character the sister"),
    upto = search("upto:12 sister"),
    path = search("path:books/ sister"),
    bad = search("upto:soon sister"),
    vague = search("sister quantum telescope volcano orbit"), -- one common word of five: no confident match
  }

  -- :SaiplingRelated for the file, :[range]SaiplingRelated for the passage at those lines (marcus.md line 9).
  local function related_rows(command)
    shown = nil
    vim.cmd(command)
    vim.wait(20000, function()
      return shown ~= nil
    end, 20)
    return shown
  end
  r.related_file = related_rows("SaiplingRelated")
  r.related_passage = related_rows("9SaiplingRelated")
  r.related_range = related_rows("7,9SaiplingRelated")

  -- The related window follows the current file; <CR> opens a passage.
  local source_win = vim.api.nvim_get_current_win()
  vim.cmd("SaiplingRelatedWindow")
  local related = require("saipling.related")
  local buf = related.state.buf
  local first_header = "Related to " .. os.getenv("NVIMTEST_OPEN_REL")
  r.related_first_ok = vim.wait(20000, function()
    local lines = rows_of(buf)
    return lines[1] == first_header and #lines > 2 and lines[3]:find(" § ", 1, true) ~= nil
  end, 50)
  r.related_first = rows_of(buf)
  r.related_cursor_stayed = vim.api.nvim_get_current_win() == source_win
  vim.cmd.edit(vim.fn.fnameescape(assert(os.getenv("NVIMTEST_OTHER"))))
  local second_header = "Related to " .. os.getenv("NVIMTEST_OTHER_REL")
  r.related_second_ok = vim.wait(20000, function()
    local lines = rows_of(buf)
    return lines[1] == second_header and #lines > 2 and lines[3]:find(" § ", 1, true) ~= nil
  end, 50)
  r.related_second = rows_of(buf)
  -- A file written outside the editor, then :SaiplingReindex: when indexing ends the window refreshes.
  local new_file = r.cwd .. "/notes/market.md"
  vim.fn.mkdir(r.cwd .. "/notes", "p")
  vim.fn.writefile({ "# Market Day", "", "Fishmongers crowd the quay again, and the rope sellers shout." }, new_file)
  vim.cmd("SaiplingReindex")
  r.related_after_reindex_ok = vim.wait(30000, function()
    for _, line in ipairs(rows_of(buf)) do
      if vim.startswith(line, "notes/market.md") then
        return true
      end
    end
    return false
  end, 50)
  r.related_after_reindex = rows_of(buf)
  r.related_second_first_result = related.state.results[1] -- what <CR> on the first row opens
  vim.api.nvim_set_current_win(related.state.win)
  vim.api.nvim_win_set_cursor(related.state.win, { 3, 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<CR>", true, false, true), "x", false)
  vim.wait(2000, function()
    return vim.api.nvim_get_current_win() ~= related.state.win
  end, 20)
  r.related_opened = T.position()
  r.related_window_still_open = related.is_open()

  -- :checkhealth with a running server, after one failed request (the last error).
  saipling.request("saipling/search", { query = "x", maxResults = "many" })
  vim.wait(5000, function()
    return saipling.last_error ~= nil
  end, 20)
  vim.cmd("checkhealth saipling")
  r.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
end)
